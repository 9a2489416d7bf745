//! What both sides of a comparison share: a quantity in A and in B, and how devices are named.

use serde::Serialize;

pub(super) const MIB: f64 = 1024.0 * 1024.0;

/// How a device of a comparison is named: `cuda:N`, or pinned host memory (keyed
/// [`crate::format::HOST_DEVICE`] in a comparison, whatever its index in each snapshot).
pub fn device_name(device: u32) -> String {
    crate::format::device_name(device, Some(crate::format::HOST_DEVICE))
}

/// The notes for devices only one side has: they are not compared.
pub(super) fn devices_in_one(
    a: &std::collections::BTreeSet<u32>,
    b: &std::collections::BTreeSet<u32>,
    notes: &mut Vec<String>,
) {
    for (side, x, y) in [("A", a, b), ("B", b, a)] {
        let only: Vec<String> = x.difference(y).map(|d| device_name(*d)).collect();
        if !only.is_empty() {
            notes.push(format!(
                "devices only in {side}: {} (not compared)",
                only.join(", ")
            ));
        }
    }
}

/// A quantity in A, in B, and B − A (`None` where a side lacks it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Pair {
    /// In A (the baseline).
    pub a: Option<f64>,
    /// In B (the run compared with it).
    pub b: Option<f64>,
    /// B − A, when both have it.
    pub change: Option<f64>,
}

impl Pair {
    /// A pair and its change.
    pub fn new(a: Option<f64>, b: Option<f64>) -> Self {
        let change = match (a, b) {
            (Some(a), Some(b)) => Some(b - a),
            _ => None,
        };
        Self { a, b, change }
    }

    /// Both sides have it.
    pub fn both(&self) -> bool {
        self.change.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_change_only_with_both_sides() {
        assert_eq!(Pair::new(Some(1.0), Some(3.0)).change, Some(2.0));
        assert_eq!(Pair::new(None, Some(3.0)).change, None);
    }
}
