//! A JSON value read loosely: a number (also one written as a string, as old traces write thread
//! ids), a boolean, or anything else skipped without being kept. Profilers of different years
//! write the same field in different types; a trace is not refused for one of them.

use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// One JSON value, as far as a trace's reader cares.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) enum Loose {
    /// The field is not there.
    #[default]
    Absent,
    /// A number.
    Num(f64),
    /// A boolean.
    Bool(bool),
    /// Anything else (null, a string that is no number, an array, an object).
    Other,
}

impl Loose {
    /// The number, if it is one.
    pub(crate) fn num(self) -> Option<f64> {
        match self {
            Self::Num(n) if n.is_finite() => Some(n),
            _ => None,
        }
    }

    /// The number as a whole one, if it is one and fits.
    pub(crate) fn int(self) -> Option<i64> {
        self.num()
            .filter(|n| n.fract() == 0.0 && n.abs() < 9.0e18)
            .map(|n| n as i64)
    }

    /// The number as a whole non-negative one.
    pub(crate) fn uint(self) -> Option<u64> {
        self.int().and_then(|n| u64::try_from(n).ok())
    }

    /// The boolean, if it is one.
    pub(crate) fn bool(self) -> Option<bool> {
        match self {
            Self::Bool(b) => Some(b),
            _ => None,
        }
    }
}

struct LooseVisitor;

impl<'de> Visitor<'de> for LooseVisitor {
    type Value = Loose;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Loose, E> {
        Ok(Loose::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Loose, E> {
        Ok(Loose::Num(v as f64))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Loose, E> {
        Ok(Loose::Num(v as f64))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Loose, E> {
        Ok(Loose::Num(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Loose, E> {
        Ok(v.trim().parse::<f64>().map_or(Loose::Other, Loose::Num))
    }

    fn visit_unit<E>(self) -> Result<Loose, E> {
        Ok(Loose::Other)
    }

    fn visit_none<E>(self) -> Result<Loose, E> {
        Ok(Loose::Other)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Loose, D::Error> {
        Loose::deserialize(d)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Loose, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Loose::Other)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Loose, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Loose::Other)
    }
}

impl<'de> Deserialize<'de> for Loose {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(LooseVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_of_any_type_are_read_loosely() {
        let read = |s: &str| serde_json::from_str::<Loose>(s).expect("json");
        assert_eq!(read("25738").int(), Some(25738));
        assert_eq!(read("\"25738\"").int(), Some(25738));
        assert_eq!(read("5656330066376.841").num(), Some(5656330066376.841));
        assert_eq!(read("-512").uint(), None);
        assert_eq!(read("-512").int(), Some(-512));
        assert_eq!(read("1.5").int(), None);
        assert_eq!(read("true").bool(), Some(true));
        assert_eq!(read("\"cuda\""), Loose::Other);
        assert_eq!(read("[1, {\"a\": 2}]"), Loose::Other);
        assert_eq!(read("null"), Loose::Other);
    }
}
