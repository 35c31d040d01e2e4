//! The int64 guard of the native partials. Python ints are unbounded; a native int field is
//! an int64 whose overflow is a sticky `Val::Overflow`. Before partials join a tree, a
//! `Guard` tells whether an int field of some combination of them could leave int64, so that
//! the caller can hand the state to the Python path first and results stay exact.
//!
//! Only the int `add`/`sub` of the combines can overflow, on the added fields (`count`,
//! `sum`, `mean`'s three, the n of `geomean` and the stddevs, the count of
//! `maxcount`/`mincount`). When each partial taken (a lifted event or a loaded partial) has
//! every added int field within `B` in magnitude, every combination of `n` of them, and every
//! intermediate value of its combines, is within `B * n`. So `B * n <= i64::MAX` rules an
//! overflow out, with `n` bounded by the partials taken since the last reset (O(1): passes for
//! any realistic stream of small ints), else by a tree's counter field (its `count`, or the n
//! of `mean`/`geomean`/the stddevs), which counts each partial at least once while every
//! partial taken counted at least 1. `B` starts at 1 (the counts).

use crate::monoids::{Kind, Spec, Val};

/// Whether `n` partials with added fields within `bound` cannot leave int64.
pub fn fits(bound: u64, n: u64) -> bool {
    bound as u128 * n as u128 <= i64::MAX as u128
}

/// The bound `B` and the partials taken of one set of trees (see the module doc).
#[derive(Clone, Debug)]
pub struct Guard {
    /// The fields an int add touches.
    added: Vec<usize>,
    /// An event's value lands in an added field (`sum`, `mean`).
    value_added: bool,
    /// A field counting the events a partial stands for.
    counter: Option<usize>,
    /// `B`: the largest magnitude of an added int field taken (at least 1).
    bound: u64,
    /// Partials taken since the last reset.
    taken: u64,
    /// Every partial taken had a counter of at least 1.
    counted: bool,
}

impl Guard {
    pub fn new(spec: &Spec) -> Guard {
        let (mut added, mut value_added, mut counter) = (Vec::new(), false, None);
        for &(kind, o) in &spec.parts {
            match kind {
                Kind::Count => {
                    added.push(o);
                    counter.get_or_insert(o);
                }
                Kind::Sum => {
                    added.push(o);
                    value_added = true;
                }
                Kind::Mean | Kind::Geomean => {
                    added.extend([o, o + 1, o + 2]);
                    value_added |= kind == Kind::Mean;
                    counter.get_or_insert(o);
                }
                Kind::SampleStddev | Kind::PopStddev => {
                    added.push(o);
                    counter.get_or_insert(o);
                }
                Kind::Maxcount | Kind::Mincount => added.push(o + 1),
                Kind::Min | Kind::Max | Kind::First | Kind::Last => {}
            }
        }
        Guard {
            added,
            value_added,
            counter,
            bound: 1,
            taken: 0,
            counted: true,
        }
    }

    /// `B` so far.
    pub fn bound(&self) -> u64 {
        self.bound
    }

    /// Forget every partial taken (the trees are empty).
    pub fn reset(&mut self) {
        (self.bound, self.taken, self.counted) = (1, 0, true);
    }

    /// The magnitude that an event's value `v` brings to its partial's added fields.
    #[inline]
    pub fn value_bound(&self, v: &Val) -> u64 {
        match v {
            Val::Int(x) if self.value_added => x.unsigned_abs().max(1),
            _ => 1,
        }
    }

    /// The largest magnitude of an added int field of partial `p` (at least 1).
    pub fn partial_bound(&self, p: &[Val]) -> u64 {
        self.added.iter().fold(1, |b, &o| {
            b.max(match p[o] {
                Val::Int(x) => x.unsigned_abs(),
                Val::Overflow => u64::MAX,
                _ => 0,
            })
        })
    }

    /// Whether partial `p` counts at least one event.
    pub fn counts_one(&self, p: &[Val]) -> bool {
        self.counter
            .is_some_and(|o| matches!(p[o], Val::Int(c) if c >= 1))
    }

    /// Whether `n` more partials within `bound` fit, counted over every partial taken.
    #[inline]
    pub fn fits_taken(&self, bound: u64, n: u64) -> bool {
        fits(self.bound.max(bound), self.taken.saturating_add(n))
    }

    /// Whether `n` more partials within `bound` fit in a tree whose whole aggregate is
    /// `aggregate` (None: no tree), counted by its counter field; false when that is unknown.
    pub fn fits_tree(&self, bound: u64, aggregate: Option<&[Val]>, n: u64) -> bool {
        let Some(o) = self.counter.filter(|_| self.counted) else {
            return false;
        };
        let present = match aggregate.map(|p| p[o]) {
            None => 0,
            Some(Val::Int(c)) if c >= 0 => c as u64,
            Some(_) => return false,
        };
        fits(self.bound.max(bound), present.saturating_add(n))
    }

    /// Account for `n` partials taken within `bound`; `counted`: each counts at least one.
    pub fn take(&mut self, bound: u64, n: u64, counted: bool) {
        self.bound = self.bound.max(bound);
        self.taken = self.taken.saturating_add(n);
        self.counted &= counted;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fiba::Monoid;
    use crate::monoids::Fields;
    use std::sync::Arc;

    fn spec(kinds: &[Kind]) -> Spec {
        Spec::new(kinds)
    }

    #[test]
    fn the_bound_holds_only_for_the_added_fields() {
        let g = Guard::new(&spec(&[Kind::Max, Kind::Count, Kind::Maxcount]));
        assert_eq!(g.value_bound(&Val::Int(i64::MIN)), 1); // max compares, never adds
        let p = [
            Val::Int(i64::MIN),
            Val::Int(3),
            Val::Int(i64::MAX),
            Val::Int(5),
        ];
        assert_eq!(g.partial_bound(&p), 5);
        let g = Guard::new(&spec(&[Kind::Sum]));
        assert_eq!(g.value_bound(&Val::Int(i64::MIN)), 1 << 63);
        assert!(!g.counts_one(&[Val::Int(1)])); // no counter
        assert!(!g.fits_tree(1, None, 1));
    }

    #[test]
    fn a_combination_within_the_rule_never_overflows_and_one_beyond_may() {
        let kinds = [Kind::Count, Kind::Sum, Kind::Mean];
        let m: Fields<5> = Fields {
            spec: Arc::new(spec(&kinds)),
        };
        let mut g = Guard::new(&m.spec);
        let lift = |x: i64| {
            [
                Val::Int(1),
                Val::Int(x),
                Val::Int(1),
                Val::Int(x),
                Val::Int(0),
            ]
        };
        let x = i64::MAX / 3;
        let b = g.value_bound(&Val::Int(x));
        assert!(g.fits_taken(b, 3));
        g.take(b, 3, true);
        let all = (0..3).fold(m.identity(), |acc, _| m.combine(&acc, &lift(x)));
        assert!(all.iter().all(|v| matches!(v, Val::Int(_))));
        assert!(!g.fits_taken(b, 1));
        assert!(g.fits_tree(b, Some(&lift(x)), 2)); // a tree of one event: 3 in all
        assert!(!g.fits_tree(b, Some(&all), 1));
        let over = m.combine(&all, &lift(x));
        assert!(matches!(over[1], Val::Overflow));
        g.take(1, 1, false); // a partial counting nothing: the counter no longer bounds
        assert!(!g.fits_tree(1, None, 1));
        g.reset();
        assert!(g.fits_tree(1, None, 1) && g.fits_taken(1 << 62, 1));
    }
}
