//! How numbers are written for people: bytes and durations, the same in the report, the
//! verdict, the collector's summary and the viewer.

/// A p-value as a reader takes it in: two decimals from 0.01 up ("0.75", "1.00"), else in
/// scientific form ("4.77e-13"), never "1.0e0".
pub fn format_p(p: f64) -> String {
    if p >= 0.01 {
        format!("{p:.2}")
    } else {
        format!("{p:.2e}")
    }
}

/// Formats bytes in binary units with three significant digits (`1.23 GiB`, `-512 KiB`).
pub fn format_bytes(bytes: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let sign = if bytes < 0.0 { "-" } else { "" };
    let mut value = bytes.abs();
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{sign}{value:.0} B")
    } else if value >= 100.0 {
        format!("{sign}{value:.0} {}", UNITS[unit])
    } else if value >= 10.0 {
        format!("{sign}{value:.1} {}", UNITS[unit])
    } else {
        format!("{sign}{value:.2} {}", UNITS[unit])
    }
}

/// `1 h 05 min`, `3 min 20 s`, `12 s`, `420 ms`.
pub fn format_duration(seconds: f64) -> String {
    // Under half a second, milliseconds: "0 s" says nothing.
    if seconds < 0.5 {
        return format!("{} ms", (seconds.max(0.0) * 1e3).round() as u64);
    }
    let s = seconds.max(0.0).round() as u64;
    if s >= 3600 {
        format!("{} h {:02} min", s / 3600, s / 60 % 60)
    } else if s >= 60 {
        format!("{} min {:02} s", s / 60, s % 60)
    } else {
        format!("{s} s")
    }
}

/// "1.5 s", "2:05", "1:02:05": a time for an axis label.
pub fn format_seconds(seconds: f64) -> String {
    if seconds.abs() < 60.0 {
        let text = format!("{seconds:.3}");
        let text = text.trim_end_matches('0').trim_end_matches('.');
        return format!("{text} s");
    }
    let total = seconds.round() as i64;
    let (h, m, s) = (total / 3600, (total / 60) % 60, total % 60);
    if h > 0 {
        format!("{h}:{m:02}:{s:02}")
    } else {
        format!("{m}:{s:02}")
    }
}

/// `1 block`, `3 blocks`, `2 entries`.
pub fn count(n: usize, what: &str) -> String {
    match (n, what.strip_suffix('y')) {
        (1, _) => format!("1 {what}"),
        (_, Some(stem)) => format!("{n} {stem}ies"),
        _ => format!("{n} {what}s"),
    }
}

/// Round marks for a byte axis between `lo` and `hi`: the multiples of the smallest power of two
/// that is at least `min_step` (and at least one byte), and of 4 and 16 times it, each mark once
/// as `(value, step)` with the step of the coarsest of those levels it is on — so that labels read
/// 16 MiB, 32 MiB, 64 MiB, never 19.1 MiB. The viewer's grid and the pictures' ticks both come
/// from here. A level with more than 2,000 marks in the range is left out.
pub fn byte_marks(lo: f64, hi: f64, min_step: f64) -> Vec<(f64, f64)> {
    let small = 2f64.powf(min_step.max(1.0).log2().ceil());
    let steps = [small, small * 4.0, small * 16.0];
    let mut marks = Vec::new();
    for (level, &step) in steps.iter().enumerate() {
        let (first, last) = ((lo / step).ceil() as i64, (hi / step).floor() as i64);
        if last - first > 2000 {
            continue;
        }
        for i in first..=last {
            // Leave a mark to the coarser level that also has it.
            if level + 1 < steps.len() && i % 4 == 0 {
                continue;
            }
            marks.push((i as f64 * step, step));
        }
    }
    marks
}

/// What pinned host memory is called where a device's name goes.
pub const PINNED_HOST: &str = "pinned host";

/// The device pinned host memory is where several snapshots' devices meet (a comparison): the
/// same in all of them, whatever number of CUDA devices each has.
pub const HOST_DEVICE: u32 = u32::MAX;

/// How device `device` is named to a person: `cuda:N`, or [`PINNED_HOST`] when it is `host`, the
/// device a snapshot's pinned host memory was given.
pub fn device_name(device: u32, host: Option<u32>) -> String {
    if host == Some(device) {
        PINNED_HOST.to_owned()
    } else {
        format!("cuda:{device}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_axes_are_marked_at_round_binary_values() {
        const MIB: f64 = 1048576.0;
        // An axis to 67 MiB with marks at least 8.4 MiB apart: every 16 MiB.
        let mut values: Vec<f64> = byte_marks(0.0, 67.0 * MIB, 67.0 * MIB / 8.0)
            .iter()
            .map(|m| m.0)
            .collect();
        values.sort_by(f64::total_cmp);
        assert_eq!(values, [0.0, 16.0, 32.0, 48.0, 64.0].map(|v| v * MIB));
        let labels: Vec<String> = values.iter().map(|&v| format_bytes(v)).collect();
        assert_eq!(
            labels,
            ["0 B", "16.0 MiB", "32.0 MiB", "48.0 MiB", "64.0 MiB"]
        );
        // Each mark once, with the coarsest step it is on.
        let marks = byte_marks(0.0, 64.0 * MIB, 4.0 * MIB);
        assert_eq!(marks.len(), 17);
        let step_of = |v: f64| marks.iter().find(|m| m.0 == v * MIB).map(|m| m.1 / MIB);
        assert_eq!(step_of(0.0), Some(64.0));
        assert_eq!(step_of(16.0), Some(16.0));
        assert_eq!(step_of(4.0), Some(4.0));
        // Steps under a byte are a byte.
        assert_eq!(
            byte_marks(0.0, 2.0, 0.1),
            [(1.0, 1.0), (2.0, 1.0), (0.0, 16.0)]
        );
    }

    #[test]
    fn bytes_and_durations_read_as_people_write_them() {
        assert_eq!(format_bytes(0.0), "0 B");
        assert_eq!(format_bytes(1023.0), "1023 B");
        assert_eq!(format_bytes(1536.0), "1.50 KiB");
        assert_eq!(format_bytes(-512.0 * 1024.0), "-512 KiB");
        assert_eq!(format_bytes(12.5 * 1024.0 * 1024.0 * 1024.0), "12.5 GiB");
        assert_eq!(format_bytes((12u64 << 30) as f64), "12.0 GiB");
        assert_eq!(format_bytes((300u64 << 20) as f64), "300 MiB");
        assert_eq!(format_duration(12.4), "12 s");
        assert_eq!(format_duration(0.4204), "420 ms");
        assert_eq!(format_duration(0.0), "0 ms");
        assert_eq!(format_duration(0.5), "1 s");
        assert_eq!(format_duration(200.0), "3 min 20 s");
        assert_eq!(format_duration(3900.0), "1 h 05 min");
    }

    #[test]
    fn p_values_read_as_a_reader_takes_them_in() {
        assert_eq!(super::format_p(1.0), "1.00");
        assert_eq!(super::format_p(0.7712), "0.77");
        assert_eq!(super::format_p(0.01), "0.01");
        assert_eq!(super::format_p(4.77e-13), "4.77e-13");
    }
}
