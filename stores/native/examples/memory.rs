//! Resident memory per entry of `keys` FiBAs (sum,count,max) filled in interleaved order, as a
//! partition's keys fill, against their `footprint`, without Python:
//! `cargo run --release --no-default-features --example memory [entries] [keys] [late %]`.
use fiba_native::fiba::{FiBA, Footprint};
use fiba_native::monoids::{Fields, Kind, Spec, Val};
use std::sync::Arc;

fn resident() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("Linux");
    let pages: usize = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

fn main() {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("a number"))
        .collect();
    let entries = args.first().copied().unwrap_or(1_000_000);
    let keys = args.get(1).copied().unwrap_or(1000);
    let late = args.get(2).copied().unwrap_or(20);
    let min_arity = args.get(3).copied().unwrap_or(4) as usize;
    let max_arity = args.get(4).copied().unwrap_or(16) as usize;
    let spec = Arc::new(Spec::new(&[Kind::Count, Kind::Sum, Kind::Max]));
    let before = resident();
    let mut trees: Vec<FiBA<Fields<3>>> = (0..keys)
        .map(|_| FiBA::with_arity(Fields { spec: spec.clone() }, min_arity, max_arity))
        .collect();
    let mut x = 88172645463325252u64;
    let mut rand = move |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    };
    for i in 0..entries as i64 {
        let key = rand(keys) as usize;
        let t = if rand(100) < late {
            (2 * i - 2 * (1 + rand(49)) as i64).max(0)
        } else {
            2 * i + 1
        };
        let v = (rand(20000) as f64 - 10000.0) / 100.0;
        trees[key].insert(t, [Val::Int(1), Val::Float(v), Val::Float(v)]);
    }
    let grown = resident() - before;
    let mut total = Footprint::default();
    for tree in &trees {
        let f = tree.footprint();
        total.entries += f.entries;
        total.tree += f.tree;
        total.arena += f.arena;
        total.entry_bytes += f.entry_bytes;
        total.kid_bytes += f.kid_bytes;
        total.cache_bytes += f.cache_bytes;
        total.blocks += f.blocks;
    }
    let n = total.entries as f64;
    println!(
        "{} entries over {keys} keys: resident {:.1} B/entry, footprint {:.1} (arena {:.1}, entries {:.1}, headers {:.1})",
        total.entries,
        grown as f64 / n,
        total.bytes() as f64 / n,
        total.arena as f64 / n,
        total.entry_bytes as f64 / n,
        16.0 * total.blocks as f64 / n
    );
}
