//! In-order rounds of the native FiBA with the sum monoid, without Python:
//! `cargo run --release --no-default-features --example rounds [n] [rounds] [min_arity]
//! [leaf max_arity]` (default: `MAX_PER_MIN` times MIN_ARITY).
use fiba_native::fiba::{FiBA, MAX_PER_MIN};
use fiba_native::monoids::{AddOne, Val};
use std::time::Instant;

fn main() {
    let args: Vec<i64> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("a number"))
        .collect();
    let n = args.first().copied().unwrap_or(1 << 16);
    let rounds = args.get(1).copied().unwrap_or(5_000_000);
    let min_arity = args.get(2).copied().unwrap_or(4) as usize;
    let max_arity = args.get(3).map_or(MAX_PER_MIN * min_arity, |&a| a as usize);
    let mut tree = FiBA::with_arity(AddOne, min_arity, max_arity);
    let one = [Val::Int(1)];
    for t in 0..n {
        tree.insert(t, one);
    }
    let start = Instant::now();
    let mut check = 0i64;
    for t in n..n + rounds {
        tree.evict(t - n);
        tree.insert(t, one);
        if let Val::Int(i) = tree.query()[0] {
            check += i;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    println!("{:.2} M rounds/s ({check})", rounds as f64 / secs / 1e6);
}
