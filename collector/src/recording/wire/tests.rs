//! The tests of `wire`.

use super::*;

/// A parsed chunk: its count, times, and each column's id, values and whether it has bits.
type Parsed = (u64, Vec<u64>, Vec<(u32, Vec<u64>, bool)>);

/// What [`parse_chunk`] makes of a body, and whether serde reads it.
fn both(body: &[u8]) -> (Option<Parsed>, bool) {
    let mut columns = Vec::new();
    let parsed = parse_chunk(body, &mut columns).map(|(n, t, used)| {
        assert_eq!(used, body.len());
        let columns: Vec<(u32, Vec<u64>, bool)> = columns
            .iter()
            .map(|WireColumn(id, ints, valid)| (*id, ints.decode(n).unwrap(), valid.is_some()))
            .collect();
        (n, t.decode(n).unwrap(), columns)
    });
    let serde: Result<WireChunk<'_>, _> = rmp_serde::from_slice(body);
    if let (Some((n, t, columns)), Ok(wire)) = (&parsed, &serde) {
        assert_eq!((*n, t), (wire.n, &wire.t.decode(wire.n).unwrap()));
        assert_eq!(columns.len(), wire.c.len());
    }
    (parsed, serde.is_ok())
}

#[test]
fn a_chunk_as_written_is_parsed_as_serde_reads_it_and_anything_else_is_left_to_serde() {
    let key = |kind| SeriesKey {
        kind,
        device: Some(0),
        pid: None,
    };
    let chunk = Chunk {
        times_ns: vec![10, 20, 35],
        columns: vec![
            Column {
                series: key(super::super::model::SeriesKind::DeviceUsed),
                values: vec![1 << 20, 2 << 20, 3 << 20],
                valid: None,
            },
            Column {
                series: key(super::super::model::SeriesKind::HostRss),
                values: vec![7, 0, 9],
                valid: Some(vec![true, false, true]),
            },
        ],
    };
    let wire = encode_chunk(&chunk, |k| {
        u32::from(k.kind != chunk.columns[0].series.kind)
    });
    let body = rmp_serde::to_vec_named(&wire).unwrap();
    let (parsed, serde_ok) = both(&body);
    assert!(serde_ok);
    let (n, times, columns) = parsed.expect("the writer's layout is parsed");
    assert_eq!((n, times), (3, chunk.times_ns.clone()));
    assert_eq!(columns.len(), 2);
    assert_eq!(columns[0], (0, chunk.columns[0].values.clone(), false));
    assert_eq!((columns[1].0, columns[1].2), (1, true));
    // Every cut is left to serde (which says it ends early).
    for cut in 0..body.len() {
        assert_eq!(both(&body[..cut]), (None, false), "cut at {cut}");
    }
    // The keys in another order: parsed. An unknown key, a key twice, the struct as an
    // array: left to serde, which reads the first and the last and refuses the second.
    let mut reordered = Vec::new();
    rmp::encode::write_map_len(&mut reordered, 3).unwrap();
    for key in ["c", "n", "t"] {
        rmp::encode::write_str(&mut reordered, key).unwrap();
        let value = match key {
            "n" => rmp_serde::to_vec(&wire.n).unwrap(),
            "t" => rmp_serde::to_vec(&wire.t).unwrap(),
            _ => rmp_serde::to_vec(&wire.c).unwrap(),
        };
        reordered.extend(value);
    }
    assert!(both(&reordered).0.is_some());
    let mut extra = body.clone();
    extra[0] += 1; // a fixmap of four
    rmp::encode::write_str(&mut extra, "z").unwrap();
    rmp::encode::write_nil(&mut extra).unwrap();
    assert_eq!(both(&extra), (None, true));
    let mut twice = body.clone();
    twice[0] += 1;
    rmp::encode::write_str(&mut twice, "n").unwrap();
    rmp::encode::write_uint(&mut twice, 3).unwrap();
    assert_eq!(both(&twice), (None, false));
    let array = rmp_serde::to_vec(&wire).unwrap();
    assert_eq!(both(&array), (None, true));
}

#[test]
fn walks_nested_values() {
    let value = (1u8, "two", vec![3u64, 1 << 40], [("k", 5i8)]);
    let bytes = rmp_serde::to_vec(&value).unwrap();
    assert_eq!(value_end(&bytes, 0), Ok(bytes.len()));
    for cut in 0..bytes.len() {
        assert_eq!(
            value_end(&bytes[..cut], 0),
            Err(WalkError::Eof),
            "cut {cut}"
        );
    }
}

#[test]
fn huge_claimed_lengths_are_eof_not_allocation() {
    // An array claiming 2^32 - 1 elements, a bin claiming 4 GiB.
    assert_eq!(
        value_end(&[0xdd, 0xff, 0xff, 0xff, 0xff, 0], 0),
        Err(WalkError::Eof)
    );
    assert_eq!(
        value_end(&[0xc6, 0xff, 0xff, 0xff, 0xff, 0], 0),
        Err(WalkError::Eof)
    );
    assert_eq!(value_end(&[0xc1], 0), Err(WalkError::BadMarker { at: 0 }));
}
