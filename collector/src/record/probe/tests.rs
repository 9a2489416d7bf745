//! The tests of `probe`.

use super::*;

#[test]
fn parses_edges_with_and_without_allocator_numbers() {
    let clock = Clock::start();
    let far = super::super::clock::monotonic_ns() + 5_000_000_000;
    let msg = format!("tm2 P {far} 42 3 17 b 0 100 200 150 90 10 1 0 7000 9000 forward");
    let Some(Message::Edge(edge, Some(alloc))) = parse(msg.as_bytes(), clock) else {
        panic!("not parsed: {msg}");
    };
    assert_eq!(edge.phase, Phase::Forward);
    assert_eq!(edge.edge, Edge::Begin);
    assert_eq!(edge.step, Some(17));
    assert_eq!(
        edge.origin,
        Origin {
            pid: 42,
            rank: Some(3)
        }
    );
    assert!(edge.t_ns >= 4_000_000_000);
    assert_eq!(
        (alloc.allocated, alloc.reserved, alloc.peak),
        (100, 200, 150)
    );
    assert_eq!((alloc.inactive_split, alloc.retries), (10, 1));
    assert_eq!((edge.host_heap, edge.host_rss), (Some(7000), Some(9000)));

    let msg = "tm2 P 1 42 - - e - - - - - - - - - 4096 my custom phase";
    let Some(Message::Edge(edge, None)) = parse(msg.as_bytes(), clock) else {
        panic!("not parsed: {msg}");
    };
    assert_eq!(edge.phase, Phase::Custom("my custom phase".to_owned()));
    assert_eq!(edge.step, None);
    assert_eq!(edge.origin.rank, None);
    assert_eq!((edge.host_heap, edge.host_rss), (None, Some(4096)));
    assert_eq!(parse(b"tm2 D 42 7", clock), Some(Message::Dropped(7)));
    let Some(Message::Snapshot(file)) = parse(
        b"tm2 S 5 42 0 oom /data/my runs/run.rank0.oom.pickle",
        clock,
    ) else {
        panic!("a snapshot message");
    };
    assert_eq!(file.path, "/data/my runs/run.rank0.oom.pickle");
    assert_eq!((file.reason.as_str(), file.origin.rank), ("oom", Some(0)));
    assert_eq!(parse(b"tm2 S 5 42 0 why /x.pickle", clock), None);
    assert_eq!(parse(b"tm2 S 5 42 0 oom", clock), None);
}

#[test]
fn parses_what_a_backward_freed() {
    let clock = Clock::start();
    let Some(Message::SavedFreed(freed)) = parse(b"tm2 B 5 42 1 17 0 4194304", clock) else {
        panic!("a saved-freed message");
    };
    assert_eq!(
        (freed.step, freed.device, freed.bytes),
        (Some(17), Some(0), 4_194_304)
    );
    assert_eq!((freed.origin.pid, freed.origin.rank), (42, Some(1)));
    let Some(Message::SavedFreed(host)) = parse(b"tm2 B 5 42 - - - 10", clock) else {
        panic!("a host saved-freed message");
    };
    assert_eq!((host.step, host.device, host.bytes), (None, None, 10));
    assert_eq!(parse(b"tm2 B 5 42 1 17 0", clock), None);
    assert_eq!(parse(b"tm2 B 5 42 1 17 0 ten", clock), None);
    assert_eq!(parse(b"tm2 B 5 42 1 17 0 10 11", clock), None);
}

#[test]
fn parses_steps_the_probe_did_not_observe() {
    let clock = Clock::start();
    let now = super::super::clock::monotonic_ns();
    let (since, t) = (now + 5_000_000_000, now + 6_000_000_000);
    let line = format!("tm2 U {t} 42 1 17 3 {since}");
    let Some(Message::Unobserved(span)) = parse(line.as_bytes(), clock) else {
        panic!("an unobserved message: {line}");
    };
    // Both times are the sender's monotonic clock, made times after the start alike.
    assert_eq!(
        (span.since_ns, span.t_ns),
        (clock.since_start_ns(since), clock.since_start_ns(t))
    );
    assert_eq!(span.t_ns - span.since_ns, 1_000_000_000);
    assert!(span.since_ns >= 4_000_000_000);
    assert_eq!((span.first_step, span.steps), (Some(17), 3));
    assert_eq!((span.origin.pid, span.origin.rank), (42, Some(1)));
    let line = format!("tm2 U {t} 42 - - 1 {since}\n");
    let Some(Message::Unobserved(unnumbered)) = parse(line.as_bytes(), clock) else {
        panic!("an unobserved message without step numbers: {line}");
    };
    assert_eq!(
        (
            unnumbered.first_step,
            unnumbered.steps,
            unnumbered.origin.rank
        ),
        (None, 1, None)
    );
    // No steps, a missing field, an extra field, a span that ends before it starts.
    assert_eq!(
        parse(format!("tm2 U {t} 42 1 17 0 {since}").as_bytes(), clock),
        None
    );
    assert_eq!(
        parse(format!("tm2 U {t} 42 1 17 3").as_bytes(), clock),
        None
    );
    assert_eq!(
        parse(format!("tm2 U {t} 42 1 17 3 {since} 9").as_bytes(), clock),
        None
    );
    assert_eq!(
        parse(format!("tm2 U {since} 42 1 17 3 {t}").as_bytes(), clock),
        None
    );
}

#[test]
fn parses_categories_and_censuses() {
    let clock = Clock::start();
    let Some(Message::Categories(c)) = parse(b"tm2 C 5 42 1 17 0 100 20 30 900 40,5", clock) else {
        panic!("a categories message");
    };
    assert_eq!(
        (c.step, c.device, c.parameters, c.gradients),
        (Some(17), Some(0), 100, 20)
    );
    assert_eq!((c.gradients_at_last_end, c.total), (Some(30), Some(900)));
    assert_eq!(c.optimizer_state, vec![40, 5]);
    assert_eq!(c.rest(), Some(900 - 165));
    let Some(Message::Categories(host)) = parse(b"tm2 C 5 42 - 0 - 100 0 - - -", clock) else {
        panic!("a host categories message");
    };
    assert_eq!((host.device, host.total, host.rest()), (None, None, None));
    assert!(host.optimizer_state.is_empty());

    let json = r##"{"holders":[{"key":"#1","name":"my list","what":"list, a global of __main__","device":null,"tensors":3,"bytes":12,"graph_bytes":0,"with_graph":0,"items":3}],"objects":9,"skipped":1,"cost_ns":77,"future_field":true}"##;
    let Some(Message::Note(note)) = parse(b"tm2 N 5 42 3 the probe stopped reading", clock) else {
        panic!("a note");
    };
    assert_eq!(note.text, "rank 3: the probe stopped reading");
    let line = format!("tm2 H 5 42 0 16 step {json}");
    let Some(Message::Census(census)) = parse(line.as_bytes(), clock) else {
        panic!("a census message: {line}");
    };
    assert_eq!((census.step, census.reason.as_str()), (Some(16), "step"));
    assert_eq!(census.holders[0].name, "my list", "names may hold spaces");
    assert_eq!((census.objects, census.skipped, census.cost_ns), (9, 1, 77));
    for bad in [
        "tm2 C 5 42 1 17 0 100 20 30 900",
        "tm2 C 5 42 1 17 0 100 20 30 900 4,x",
        "tm2 C 5 42 1 17 0 100 20 30 900 4 extra",
        "tm2 H 5 42 0 16 why {}",
        "tm2 H 5 42 0 16 step {not json",
    ] {
        assert_eq!(parse(bad.as_bytes(), clock), None, "{bad}");
    }
}

#[test]
fn malformed_messages_are_none() {
    let clock = Clock::start();
    for bad in [
        &b""[..],
        b"hello",
        b"tm2 P",
        b"tm2 P x 42 - - b - - - - - - - - - - forward",
        b"tm2 P 1 42 - - x - - - - - - - - - - forward",
        b"tm2 P 1 42 - - b - - - - - - - - - - ",
        b"tm2 P 1 42 - - b 0 1 - - - - - - - - forward",
        b"tm2 P 1 42 - - b - - - - - - - - x - forward",
        b"tm2 P 1 42 - - b - - - - - - - -",
        b"tm1 P 1 42 - - b - - - - - - - - forward",
        b"tm3 P 1 42 - - b - - - - - - - - - - forward",
        b"tm2 D 1",
        b"\xff\xfe",
    ] {
        assert_eq!(
            parse(bad, clock),
            None,
            "{:?}",
            String::from_utf8_lossy(bad)
        );
    }
}

#[test]
fn parses_the_signal_a_process_answers_with_its_stacks() {
    let clock = Clock::start();
    let Some(Message::Answers(_, origin, signal)) = parse(b"tm2 T 1 42 3 47\n", clock) else {
        panic!("not parsed");
    };
    assert_eq!((origin.pid, origin.rank, signal), (42, Some(3), 47));
    assert_eq!(parse(b"tm2 T 1 42 3 x", clock), None);
    assert_eq!(parse(b"tm2 T 1 42 3 47 more", clock), None);
}
