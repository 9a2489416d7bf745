//! Any bytes given to the recording reader: a recording, a warning or an error, never a panic.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    let whole = collector::recording::read_recording(bytes);
    if let Ok(recording) = &whole {
        // Everything read must have come from the bytes: one varint byte per sample at least,
        // plus the first value of each column.
        assert!(recording.sample_count() <= 2 * bytes.len() as u64);
        // Every series has a time per value.
        for series in &recording.series {
            assert_eq!(series.times_ns.len(), series.values.len());
        }
    }
    // The incremental reader, its records pushed one by one, makes the same recording as the
    // whole-file reader (which decodes chunks straight into their series).
    if let Ok(mut reader) = collector::recording::Reader::new(bytes) {
        let mut pushed = collector::recording::Recording::new(reader.header().clone());
        let complete = loop {
            match reader.read_next() {
                Ok(Some(record)) => pushed.push(record),
                Ok(None) | Err(collector::recording::ReadError::Truncated { .. }) => break true,
                Err(_) => break false,
            }
        };
        if let (true, Ok(whole)) = (complete, &whole) {
            assert_eq!(whole.series, pushed.series);
            assert_eq!(whole.allocator, pushed.allocator);
            assert_eq!(whole.phases, pushed.phases);
        }
    }
});
