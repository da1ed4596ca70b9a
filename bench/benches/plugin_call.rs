//! Row 8 under criterion: instantiate + call + return of an empty plugin
//! handler through `Runtime::invoke`, with an empty and a 64 KiB body.
//! Needs `bench-empty` built (see bench/README.md).

use agora_bench::plugin_call::Bench;
use criterion::{Criterion, criterion_group, criterion_main};

fn plugin_call(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let bench = runtime.block_on(Bench::new()).expect("bench-empty loads");
    let mut group = c.benchmark_group("plugin_call");
    for (name, size) in [("empty", 0usize), ("body_64k", 64 * 1024)] {
        let body = "x".repeat(size);
        group.bench_function(name, |b| {
            b.iter(|| runtime.block_on(bench.call(&body)).expect("the call succeeds"))
        });
    }
    group.finish();
}

criterion_group!(benches, plugin_call);
criterion_main!(benches);
