//! The heap a partition's windows hold per key when each key holds few entries (sum,count,max):
//! the live bytes of a counting allocator (this test binary's), exact, so that the per-key parts
//! (map slot, sweep index, key string, tree struct, arena, spine caches, spare entry slots) are
//! held to a budget.
use fiba_native::monoids::{Fields, Kind, Spec, Val};
use fiba_native::windows::{Settings, Windows};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size(), Relaxed);
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Relaxed);
        System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(new_size, Relaxed);
        LIVE.fetch_sub(layout.size(), Relaxed);
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Live heap bytes per key of `keys` keys filled with `per_key` entries each, interleaved as a
/// partition's keys fill (one event in five late), through `insert_one`.
fn bytes_per_key(keys: usize, per_key: usize) -> f64 {
    let spec = Arc::new(Spec::new(&[Kind::Count, Kind::Sum, Kind::Max]));
    let cfg = Settings {
        sizes: vec![100, 10_000],
        retention: 1 << 40,
        max_future_skew: None,
        max_wall_clock_skew: None,
        resolution: None,
        event_time_end: false,
    };
    let names: Vec<String> = (0..keys).map(|k| format!("key-{k}")).collect();
    let before = LIVE.load(Relaxed);
    let mut windows = Windows::new(Fields { spec }, cfg, 4);
    for i in 0..(keys * per_key) as i64 {
        let key = &names[i as usize % keys];
        // one event in five lands one to three of its key's entries back
        let back = keys as i64 * (1 + i % 3);
        let t = if i % 5 == 4 && i >= back {
            4 * (i - back) + 2
        } else {
            4 * i + 1
        };
        windows.advance(t);
        windows.insert_one(key, t, [Val::Int(1), Val::Float(1.5), Val::Float(1.5)]);
    }
    assert_eq!(windows.entry_count(), keys * per_key);
    let live = LIVE.load(Relaxed) - before;
    drop(windows);
    live as f64 / keys as f64
}

#[test]
fn a_key_with_few_entries_costs_little_besides_them() {
    // an entry itself is 35 bytes (an 8-byte time, a 27-byte packed partial)
    // before the compact nodes (16-byte buffer headers, u32 counts, u8 heights, the halves of
    // a middle cut in buffers of their size): 591 / 1,001 / 5,826; after: 477 / 887 / 5,155
    for (per_key, budget) in [(1, 500.0), (10, 900.0), (100, 5400.0)] {
        let per = bytes_per_key(2000, per_key);
        eprintln!("{per_key} entries per key: {per:.0} B per key");
        assert!(per <= budget, "{per_key} per key: {per:.0} B > {budget}");
    }
}
