//! Uncontended `get` + `put_return` on one `LockRef`, per retry policy.
//!
//! One group, so the report lines sit together and the policies' ratios can
//! be read off directly. Uncontended, every policy should take its lock-free
//! path on the first CAS (the lockref starts at count 10, above `Waiman`'s
//! floors), so the figures measure the cost of each policy's loop shape, not
//! its behaviour under contention (that is `dcache bench lockref*`).

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use dcache::lockref::{Dcache, Linux, LockRef, Policy, SpinWait, Waiman};
use dcache_bench::cache_aligned::CacheAligned;

fn get_put<P: Policy>(c: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>) {
    let lr = CacheAligned::new(LockRef::<P>::with_count(10));
    c.bench_function(P::NAME, |b| {
        b.iter(|| {
            black_box(&*lr).get();
            black_box(black_box(&*lr).put_return())
        })
    });
    // Every put_return must have taken the lock-free path.
    assert_eq!(lr.count(), 10, "{}: a put_return fell back", P::NAME);
}

fn uncontended(c: &mut Criterion) {
    let mut g = c.benchmark_group("lockref_uncontended_get_put");
    get_put::<Linux>(&mut g);
    get_put::<SpinWait>(&mut g);
    get_put::<Waiman>(&mut g);
    get_put::<Dcache>(&mut g);
    g.finish();
}

criterion_group!(benches, uncontended);
criterion_main!(benches);
