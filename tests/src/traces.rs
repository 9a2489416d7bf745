//! Profiler traces made to order: a training loop's memory events and phase annotations, as
//! PyTorch's profiler writes them (`export_chrome_trace`), with a leak planted where asked.

/// A trace as `torch.profiler` writes it: `steps` ProfilerSteps of 100 ms with labelled
/// forward, backward and optimizer spans; 100 MiB of parameters; forward makes 50 MiB of
/// activations (freed in backward) and keeps `leak` bytes; the optimizer a 10 MiB temporary.
pub fn generated_trace(steps: u64, leak: u64) -> String {
    const MIB: u64 = 1 << 20;
    let mut events = Vec::new();
    let mut total = 100 * MIB;
    let mut mem = |events: &mut Vec<String>, ts: u64, bytes: i64| {
        total = total.saturating_add_signed(bytes);
        events.push(format!(
            r#"{{"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 7, "tid": 7, "ts": {ts}, "args": {{"Device Type": 1, "Device Id": 0, "Bytes": {bytes}, "Total Allocated": {total}, "Total Reserved": {}, "finished": true}}}}"#,
            1024 * MIB
        ));
    };
    let span = |events: &mut Vec<String>, name: &str, ts: u64, dur: u64| {
        events.push(format!(
            r#"{{"ph": "X", "cat": "user_annotation", "name": "{name}", "pid": 7, "tid": 7, "ts": {ts}, "dur": {dur}}}"#
        ));
    };
    let t0 = 1_700_000_000_000_000u64;
    mem(&mut events, t0, (100 * MIB) as i64);
    for step in 0..steps {
        let t = t0 + 1000 + step * 100_000;
        span(&mut events, &format!("ProfilerStep#{step}"), t, 99_000);
        span(&mut events, "## forward ##", t + 1000, 39_000);
        mem(&mut events, t + 2000, (50 * MIB) as i64);
        mem(&mut events, t + 3000, leak as i64);
        span(&mut events, "## backward ##", t + 40_000, 40_000);
        mem(&mut events, t + 60_000, -((50 * MIB) as i64));
        span(&mut events, "Optimizer.step#SGD.step", t + 80_000, 15_000);
        mem(&mut events, t + 85_000, (10 * MIB) as i64);
        mem(&mut events, t + 90_000, -((10 * MIB) as i64));
    }
    format!(
        r#"{{"schemaVersion": 1, "deviceProperties": [{{"id": 0, "name": "NVIDIA H100", "totalGlobalMem": 85899345920}}], "traceEvents": [{}]}}"#,
        events.join(",\n")
    )
}

/// [`generated_trace`] as rank `rank` of two writes it: `distributedInfo`, on its own GPU.
pub fn rank_trace(steps: u64, leak: u64, rank: u32) -> String {
    generated_trace(steps, leak)
        .replace("\"Device Id\": 0", &format!("\"Device Id\": {rank}"))
        .replace("{\"id\": 0,", &format!("{{\"id\": {rank},"))
        .replacen(
            "{\"schemaVersion\": 1,",
            &format!(
                "{{\"schemaVersion\": 1, \"distributedInfo\": {{\"backend\": \"nccl\", \"rank\": {rank}, \"world_size\": 2}},"
            ),
            1,
        )
}
