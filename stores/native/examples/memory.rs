//! Memory per entry and per key of one partition's windows (`Windows`, sum,count,max) filled
//! in interleaved order as a partition's keys fill, without Python:
//! `cargo run --release --no-default-features --example memory [entries] [entries per key,
//! e.g. 10,100,1000] [late %] [min_arity]`. Each entries-per-key figure runs
//! in a fresh process (this example re-run). Prints resident bytes per entry (`/proc`), the
//! heap's live bytes (a counting allocator: exact) per entry and per key, and where a key's
//! bytes go: its trees' `footprint` by kind, the windows' own (map slot, sweep index, key
//! string) as the heap's rest.
use fiba_native::fiba::Footprint;
use fiba_native::monoids::{Fields, Kind, Spec, Val};
use fiba_native::windows::{Settings, Windows};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

/// The system allocator, counting live bytes and blocks.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static BLOCKS: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size(), Relaxed);
        BLOCKS.fetch_add(1, Relaxed);
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Relaxed);
        BLOCKS.fetch_sub(1, Relaxed);
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

fn resident() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("Linux");
    let pages: usize = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let entries: u64 = args
        .first()
        .map_or(1_000_000, |a| a.parse().expect("a number"));
    let per_key = args.get(1).map_or("10,100,1000", String::as_str);
    let rest: Vec<u64> = args
        .iter()
        .skip(2)
        .map(|a| a.parse().expect("a number"))
        .collect();
    if per_key.contains(',') {
        for k in per_key.split(',') {
            let mut child = std::env::args().take(1).collect::<Vec<_>>();
            child.extend([entries.to_string(), k.to_string()]);
            child.extend(args.iter().skip(2).cloned());
            let status = std::process::Command::new(std::env::current_exe().expect("self"))
                .args(&child[1..])
                .status()
                .expect("the example runs");
            assert!(status.success());
        }
        return;
    }
    let per_key: u64 = per_key.parse().expect("a number");
    let keys = (entries / per_key).max(1);
    let late = rest.first().copied().unwrap_or(20);
    let min_arity = rest.get(1).copied().unwrap_or(4) as usize;
    let spec = Arc::new(Spec::new(&[Kind::Count, Kind::Sum, Kind::Max]));
    let cfg = Settings {
        sizes: vec![100, 10_000, 1_000_000],
        retention: 4 * entries as i64 + 10_000,
        max_future_skew: None,
        max_wall_clock_skew: None,
        resolution: None,
        event_time_end: false,
    };
    let names: Vec<String> = (0..keys).map(|k| format!("key-{k}")).collect();
    let (before, live_before, blocks_before) =
        (resident(), LIVE.load(Relaxed), BLOCKS.load(Relaxed));
    let mut windows = Windows::new(Fields { spec: spec.clone() }, cfg, min_arity);
    let mut x = 88172645463325252u64;
    let mut rand = move |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    };
    for i in 0..entries as i64 {
        let key = &names[rand(keys) as usize];
        // distinct times: every event is an entry of its own; `late` % arrive late
        let t = if rand(100) < late {
            (4 * i - 4 * (1 + rand(49)) as i64 + 2).max(0)
        } else {
            4 * i + 1
        };
        let v = (rand(20000) as f64 - 10000.0) / 100.0;
        windows.advance(t);
        windows.insert_one(key, t, [Val::Int(1), Val::Float(v), Val::Float(v)]);
    }
    let grown = resident() - before;
    let live = LIVE.load(Relaxed) - live_before;
    let blocks = BLOCKS.load(Relaxed) - blocks_before;
    let mut total = Footprint::default();
    for f in windows.footprints() {
        total.entries += f.entries;
        total.slots += f.slots;
        total.tree += f.tree;
        total.arena += f.arena;
        total.entry_bytes += f.entry_bytes;
        total.kid_bytes += f.kid_bytes;
        total.cache_bytes += f.cache_bytes;
        total.blocks += f.blocks;
    }
    let trees_heap = total.arena + total.entry_bytes + total.kid_bytes + total.cache_bytes;
    let (n, k) = (total.entries as f64, windows.len() as f64);
    let slot = total.entry_bytes as f64 / total.slots as f64;
    println!(
        "{} entries over {} keys ({per_key} per key): resident {:.1} B/entry; heap {:.1} B/entry \
         ({blocks} blocks); per key {:.0} B besides the entries' {slot:.0} B each: tree struct {}, \
         arena {:.0}, spare slots {:.0}, lists {:.0}, spine caches {:.0}, windows' map, index and \
         key {:.0} (the tree struct inside), headers (16 B a block) {:.0}",
        total.entries,
        windows.len(),
        grown as f64 / n,
        live as f64 / n,
        (live as f64 + 16.0 * blocks as f64 - slot * n) / k,
        total.tree / windows.len(),
        total.arena as f64 / k,
        (total.slots - total.entries) as f64 * slot / k,
        total.kid_bytes as f64 / k,
        total.cache_bytes as f64 / k,
        (live - trees_heap) as f64 / k,
        16.0 * blocks as f64 / k,
    );
}
