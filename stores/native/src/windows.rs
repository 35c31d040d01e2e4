//! The per-key sliding windows of one partition over the FiBA: the semantics of
//! `stores.key_windows.KeyWindows` (window times and `resolution`, the stream time `S`,
//! admission with the late / wall-clock / `max_future_skew` rules and their detail strings,
//! per-key inserts and bulk inserts with "the partial stored at the event's time after it",
//! lazy eviction, the idle-key sweep index, both `window_end` modes, range queries).
//!
//! Every window `[S - w, S]` is answered by the tree's whole query when it reaches back to
//! the key's oldest entry; the others, nested suffixes of the tree, by one `FiBA::suffixes`
//! walk from the right finger: O(log d) combines per window of the youngest d entries, the
//! spine's levels folded once for all (the Python path keeps a Two-Stacks suffix per window
//! instead, `stores.window_suffixes`). Lift and lower stay outside (the Python front gives
//! partials and lowers results).

use crate::fiba::{FiBA, Footprint, Monoid, Time};
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

/// Expired entries of a key that lazy eviction removes one by one at the old end before it
/// evicts the rest with one `bulk_evict` (`stores.key_windows.SINGLE_EVICTS`).
pub const SINGLE_EVICTS: usize = 8;

/// The oldest time of a key whose tree is new (Python's `_NEVER = 2**63`): the largest time,
/// which compares as 2**63 does (a key holding an entry at `i64::MAX` has that oldest time).
const NEVER: i64 = i64::MAX;

/// What a partition's windows are (`stores.key_windows.WindowConfig`).
#[derive(Clone, Debug)]
pub struct Settings {
    pub sizes: Vec<i64>,
    pub retention: i64,
    pub max_future_skew: Option<i64>,
    pub max_wall_clock_skew: Option<i64>,
    pub resolution: Option<i64>,
    /// `window_end = event_time`.
    pub event_time_end: bool,
}

/// A refused event: `late` (else `future`) and the detail string of the Python path.
#[derive(Debug, PartialEq)]
pub struct Rejection {
    pub late: bool,
    pub detail: String,
}

/// Where a window's partial comes from: nothing (the empty window), the key's whole tree,
/// or a range.
#[derive(Clone, Debug)]
pub enum Source<P> {
    Empty,
    Whole(P),
    Range(P),
}

struct KeyState<M: Monoid> {
    tree: FiBA<M>,
    /// Its oldest time (`NEVER` while the new tree is empty).
    oldest: i64,
    /// Its time in the sweep index: at most its oldest time.
    indexed: i64,
    /// Insertion order (Python dict order of the keys).
    seq: u64,
}

/// The windows of one partition (see the module doc).
pub struct Windows<M: Monoid + Clone> {
    m: M,
    min_arity: usize,
    pub cfg: Settings,
    pub stream_time: Option<i64>,
    /// `P`: the window time of the previous event whose time was checked.
    pub previous: Option<i64>,
    /// The keys' states; the map and the sweep index share each key's one string.
    keys: HashMap<Arc<str>, KeyState<M>>,
    index: BTreeSet<(i64, Arc<str>)>,
    seq: u64,
}

/// One key's accepted events of a batch: times and partials in input order, and the
/// events' places among the batch's effects.
pub struct Group<P> {
    pub times: Vec<Time>,
    pub partials: Vec<P>,
    pub slots: Vec<usize>,
}

impl<M: Monoid + Clone> Windows<M> {
    pub fn new(m: M, cfg: Settings, min_arity: usize) -> Self {
        Windows {
            m,
            min_arity,
            cfg,
            stream_time: None,
            previous: None,
            keys: HashMap::new(),
            index: BTreeSet::new(),
            seq: 0,
        }
    }

    /// The monoid.
    pub fn monoid(&self) -> &M {
        &self.m
    }

    // --- state ----------------------------------------------------------------------------

    /// Keys holding at least one entry.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    pub fn contains(&self, key: &str) -> bool {
        self.keys.contains_key(key)
    }

    /// The keys in the order they were (last) created. O(K log K).
    pub fn keys(&self) -> Vec<&str> {
        let mut keys: Vec<(&u64, &str)> = self.keys.iter().map(|(k, s)| (&s.seq, &**k)).collect();
        keys.sort_unstable();
        keys.into_iter().map(|(_, k)| k).collect()
    }

    /// Entries over all keys. O(K).
    pub fn entry_count(&self) -> usize {
        self.keys.values().map(|s| s.tree.len()).sum()
    }

    /// `key`'s entries in time order.
    pub fn entries(&self, key: &str) -> Vec<(Time, M::P)> {
        self.keys
            .get(key)
            .map(|s| s.tree.items())
            .unwrap_or_default()
    }

    /// The whole aggregate of `key`'s entries, if it is present. O(1).
    pub fn total(&self, key: &str) -> Option<M::P> {
        self.keys.get(key).map(|s| s.tree.query())
    }

    /// `key`'s time in the sweep index, if it is present.
    pub fn indexed(&self, key: &str) -> Option<i128> {
        self.keys.get(key).map(|s| s.indexed as i128)
    }

    /// Each present key's tree's `footprint`. O(n / MIN_ARITY).
    pub fn footprints(&self) -> impl Iterator<Item = Footprint> + '_ {
        self.keys.values().map(|s| s.tree.footprint())
    }

    /// Combines of the present keys' trees since their creation or `reset_combines`.
    pub fn combines(&self) -> u64 {
        self.keys.values().map(|s| s.tree.combines()).sum()
    }

    pub fn reset_combines(&self) {
        for s in self.keys.values() {
            s.tree.reset_combines();
        }
    }

    /// Forget every key, the stream time and `P`.
    pub fn clear(&mut self) {
        self.keys.clear();
        self.index.clear();
        self.stream_time = None;
        self.previous = None;
    }

    /// Drop `key` and its entries; false if absent. The stream time stays.
    pub fn forget(&mut self, key: &str) -> bool {
        match self.keys.remove_entry(key) {
            Some((key, state)) => {
                self.index.remove(&(state.indexed, key));
                true
            }
            None => false,
        }
    }

    /// Set `key`'s entries (sorted by time; none: nothing); the stream time becomes at
    /// least the youngest. Panics when out of order (callers check).
    pub fn load(&mut self, key: &str, pairs: Vec<(Time, M::P)>) {
        let (Some(&(first, _)), Some(&(youngest, _))) = (pairs.first(), pairs.last()) else {
            return;
        };
        self.forget(key);
        let mut tree = FiBA::new(self.m.clone(), self.min_arity);
        tree.bulk_insert(pairs);
        self.seq += 1;
        let name: Arc<str> = Arc::from(key);
        self.keys.insert(
            name.clone(),
            KeyState {
                tree,
                oldest: NEVER,
                indexed: NEVER,
                seq: self.seq,
            },
        );
        self.index.insert((NEVER, name));
        self.set_oldest(key, first);
        if self.stream_time.is_none_or(|s| youngest > s) {
            self.stream_time = Some(youngest);
        }
    }

    fn ensure(&mut self, key: &str) {
        if !self.keys.contains_key(key) {
            self.seq += 1;
            let tree = FiBA::new(self.m.clone(), self.min_arity);
            let name: Arc<str> = Arc::from(key);
            self.keys.insert(
                name.clone(),
                KeyState {
                    tree,
                    oldest: NEVER,
                    indexed: NEVER,
                    seq: self.seq,
                },
            );
            self.index.insert((NEVER, name));
        }
    }

    /// `key`'s oldest time is now `t`: earlier than before (an insert), or its first.
    fn set_oldest(&mut self, key: &str, t: i64) {
        let state = self.keys.get_mut(key).expect("present");
        state.oldest = t;
        if t < state.indexed {
            let old = state.indexed;
            state.indexed = t;
            let name = self.keys.get_key_value(key).expect("present").0.clone();
            self.index.remove(&(old, name.clone()));
            self.index.insert((t, name));
        }
    }

    // --- admission ------------------------------------------------------------------------

    /// The window time of event time `ts`: itself, or the start of its pane.
    pub fn window_time(&self, ts: i64) -> i64 {
        match self.cfg.resolution {
            None => ts,
            Some(r) => ts - ts.rem_euclid(r),
        }
    }

    /// The worker's clock `now_ms` plus `max_wall_clock_skew` (None when that is off).
    pub fn wall(&self, now_ms: Option<i64>) -> Option<i128> {
        match (self.cfg.max_wall_clock_skew, now_ms) {
            (Some(skew), Some(now)) => Some(now as i128 + skew as i128),
            _ => None,
        }
    }

    /// Check window time `t` against the stream time and `wall`; it becomes `P` whatever
    /// the outcome. Nothing else changes.
    pub fn check(&mut self, t: Time, wall: Option<i128>) -> Result<(), Rejection> {
        let previous = self.previous;
        self.previous = Some(t);
        let (t128, s) = (t as i128, self.stream_time);
        let late = s.is_some_and(|s| t128 < s as i128 - self.cfg.retention as i128);
        if late || wall.is_some_and(|w| t128 > w) || self.too_far_ahead(t, previous) {
            return Err(self.rejection(t, wall, previous));
        }
        Ok(())
    }

    fn too_far_ahead(&self, t: Time, previous: Option<i64>) -> bool {
        let (Some(skew), Some(s)) = (self.cfg.max_future_skew, self.stream_time) else {
            return false;
        };
        let (t, skew) = (t as i128, skew as i128);
        t > s as i128 + skew && t > previous.unwrap_or(s) as i128 + skew
    }

    fn rejection(&self, t: Time, wall: Option<i128>, previous: Option<i64>) -> Rejection {
        let cfg = &self.cfg;
        if let Some(s) = self.stream_time {
            if (t as i128) < s as i128 - cfg.retention as i128 {
                return Rejection {
                    late: true,
                    detail: format!("time {t} < stream time {s} - retention {}", cfg.retention),
                };
            }
        }
        if wall.is_none_or(|w| t as i128 <= w) && self.too_far_ahead(t, previous) {
            let s = self.stream_time.expect("set when too far ahead");
            return Rejection {
                late: false,
                detail: format!(
                    "time {t} > stream time {s} + max_future_skew {}, and > the previous \
                     event's time {} + max_future_skew",
                    cfg.max_future_skew.expect("set when too far ahead"),
                    previous.unwrap_or(s)
                ),
            };
        }
        let skew = cfg.max_wall_clock_skew.expect("set when beyond the clock");
        Rejection {
            late: false,
            detail: format!(
                "time {t} > the worker's clock {} + max_wall_clock_skew {skew}",
                wall.expect("set when beyond the clock") - skew as i128
            ),
        }
    }

    /// Account for an accepted event at window time `t` (the stream time).
    pub fn advance(&mut self, t: Time) {
        if self.stream_time.is_none_or(|s| t > s) {
            self.stream_time = Some(t);
        }
    }

    // --- inserts --------------------------------------------------------------------------

    /// Insert one accepted event's partial at `t` into `key` and evict its expired entries:
    /// the partial stored at `t` after it and the evicted times.
    pub fn insert_one(&mut self, key: &str, t: Time, p: M::P) -> (M::P, Vec<Time>) {
        self.ensure(key);
        let state = self.keys.get_mut(key).expect("present");
        let youngest = state.tree.youngest();
        state.tree.insert(t, p.clone());
        if t < state.oldest {
            self.set_oldest(key, t);
        }
        let evicted = self.evict_expired(key);
        let stored = match youngest {
            Some(y) if t <= y => self.keys[key].tree.get(t).expect("just inserted"),
            _ => p,
        };
        (stored, evicted)
    }

    /// Insert one key's accepted events of a batch with one bulk insert, fixing `effects`
    /// of those landing on a time already present (in the tree or earlier in the batch):
    /// their partial after them is the combined one.
    pub fn insert_group(&mut self, key: &str, group: Group<M::P>, effects: &mut [M::P]) {
        let Group {
            mut times,
            mut partials,
            mut slots,
        } = group;
        self.ensure(key);
        let state = self.keys.get_mut(key).expect("present");
        if times.windows(2).any(|w| w[1] < w[0]) {
            let mut order: Vec<usize> = (0..times.len()).collect();
            order.sort_by_key(|&i| times[i]); // stable: equal times keep their input order
            times = order.iter().map(|&i| times[i]).collect();
            partials = order.iter().map(|&i| partials[i].clone()).collect();
            slots = order.iter().map(|&i| slots[i]).collect();
        }
        let present = match state.tree.youngest() {
            None => 0,
            Some(y) => times.partition_point(|&t| t <= y),
        };
        let repeated = times.windows(2).any(|w| w[0] == w[1]);
        if present > 0 || repeated {
            let m = &self.m;
            let mut previous_t: Option<Time> = None;
            let mut after: Option<M::P> = None;
            for (i, &t) in times.iter().enumerate() {
                if previous_t == Some(t) {
                    after = Some(m.combine(after.as_ref().expect("set"), &partials[i]));
                } else {
                    let before = if i < present { state.tree.get(t) } else { None };
                    previous_t = Some(t);
                    match before {
                        None => {
                            after = Some(partials[i].clone());
                            continue;
                        }
                        Some(b) => after = Some(m.combine(&b, &partials[i])),
                    }
                }
                effects[slots[i]] = after.clone().expect("set");
            }
        }
        let first = times[0];
        state
            .tree
            .bulk_insert(times.into_iter().zip(partials).collect());
        if first < state.oldest {
            self.set_oldest(key, first);
        }
    }

    // --- retention ------------------------------------------------------------------------

    fn horizon(&self) -> Option<i128> {
        self.stream_time
            .map(|s| s as i128 - self.cfg.retention as i128)
    }

    /// Evict `key`'s entries older than `S - R`; their times. A key left empty is
    /// forgotten. O(log m) for m entries.
    pub fn evict_expired(&mut self, key: &str) -> Vec<Time> {
        let Some(horizon) = self.horizon() else {
            return Vec::new();
        };
        let Some(state) = self.keys.get_mut(key) else {
            return Vec::new();
        };
        if state.oldest as i128 >= horizon {
            return Vec::new();
        }
        let tree = &mut state.tree;
        let mut evicted = Vec::new();
        while let Some(oldest) = tree.oldest().filter(|&o| (o as i128) < horizon) {
            if evicted.len() >= SINGLE_EVICTS {
                // horizon > oldest >= i64::MIN, so horizon - 1 fits
                let bound = (horizon - 1) as Time;
                evicted.extend(tree.times_before(bound + 1));
                tree.bulk_evict(bound);
                break;
            }
            tree.evict(oldest);
            evicted.push(oldest);
        }
        match tree.oldest() {
            Some(oldest) => state.oldest = oldest,
            None => {
                self.forget(key);
            }
        }
        evicted
    }

    /// Evict every key's entries older than `S - R`; keys left empty are forgotten.
    /// `(key, evicted times)` per cleaned key, in the order of the sweep index.
    pub fn sweep(&mut self) -> Vec<(String, Vec<Time>)> {
        let Some(horizon) = self.horizon() else {
            return Vec::new();
        };
        let mut cleaned = Vec::new();
        while let Some((indexed, key)) = self.index.first().cloned() {
            if indexed as i128 >= horizon {
                break;
            }
            let evicted = self.evict_expired(&key);
            if let Some(state) = self.keys.get_mut(&key) {
                let oldest = state.oldest;
                state.indexed = oldest;
                self.index.remove(&(indexed, key.clone()));
                self.index.insert((oldest, key.clone()));
            }
            if !evicted.is_empty() {
                cleaned.push((key.to_string(), evicted));
            }
        }
        cleaned
    }

    // --- results --------------------------------------------------------------------------

    /// Every configured window of `key` at the stream time, `(start, end, source)`; none
    /// before any event. The windows reaching the oldest entry share the tree's whole query;
    /// the others are nested suffixes, answered together by one `FiBA::suffixes` walk.
    pub fn windows_of(&self, key: &str) -> Vec<(Time, Time, Source<M::P>)> {
        let Some(s) = self.stream_time else {
            return Vec::new();
        };
        let spans: Vec<(Time, i128)> = self
            .cfg
            .sizes
            .iter()
            .map(|w| (s - w, (s - w) as i128))
            .collect();
        self.spans(key, s, spans)
    }

    /// Every configured window `[end - w, end]` of `key` over its retained entries
    /// (`window_end = event_time`); none before any event. When `end` is at or past the key's
    /// youngest entry they are nested suffixes (one `FiBA::suffixes` walk), else ranges.
    pub fn windows_ending(&self, key: &str, end: Time) -> Vec<(Time, Time, Source<M::P>)> {
        let Some(horizon) = self.horizon() else {
            return Vec::new();
        };
        let spans: Vec<(Time, i128)> = self
            .cfg
            .sizes
            .iter()
            .map(|w| (end - w, ((end - w) as i128).max(horizon)))
            .collect();
        self.spans(key, end, spans)
    }

    /// `key`'s retained entries with `from <= t <= to`.
    pub fn query_range(&self, key: &str, from: Time, to: Time) -> Source<M::P> {
        match self.horizon() {
            None => Source::Empty,
            Some(horizon) => {
                let spans = vec![(from, (from as i128).max(horizon))];
                self.spans(key, to, spans).pop().expect("one span").2
            }
        }
    }

    /// The windows `(start, end, source)` of `key` for `(start, from)` pairs: the entries
    /// with `from <= t <= end`. Those reaching the oldest and youngest entries are the whole
    /// query (computed once); the suffixes (`end` at or past the youngest) come from one
    /// `FiBA::suffixes` walk; any other range from its own range query.
    fn spans(
        &self,
        key: &str,
        end: Time,
        spans: Vec<(Time, i128)>,
    ) -> Vec<(Time, Time, Source<M::P>)> {
        let Some(state) = self.keys.get(key) else {
            return spans
                .into_iter()
                .map(|(start, _)| (start, end, Source::Empty))
                .collect();
        };
        let tree = &state.tree;
        let (oldest, youngest) = (
            tree.oldest().expect("a present key has entries"),
            tree.youngest().expect("entries"),
        );
        let suffix = end >= youngest;
        let inside = |from: i128| (oldest as i128) < from && from <= end as i128;
        let starts: Vec<Time> = if suffix {
            spans
                .iter()
                .filter(|&&(_, from)| inside(from))
                .map(|&(_, from)| from as Time) // > oldest: fits an i64
                .collect()
        } else {
            Vec::new()
        };
        let mut suffixes = tree.suffixes(&starts).into_iter();
        let mut whole: Option<M::P> = None;
        spans
            .into_iter()
            .map(|(start, from)| {
                let source = if from > end as i128 {
                    Source::Empty
                } else if from <= oldest as i128 && suffix {
                    Source::Whole(whole.get_or_insert_with(|| tree.query()).clone())
                } else if suffix {
                    Source::Range(suffixes.next().expect("one per suffix"))
                } else {
                    Source::Range(tree.query_range(from.max(i64::MIN as i128) as Time, end))
                };
                (start, end, source)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fiba::tests::Sum;

    fn windows(max_future_skew: Option<i64>) -> Windows<Sum> {
        let cfg = Settings {
            sizes: vec![10, 100],
            retention: 100,
            max_future_skew,
            max_wall_clock_skew: Some(1000),
            resolution: None,
            event_time_end: false,
        };
        Windows::new(Sum, cfg, 2)
    }

    fn value(source: &Source<i64>) -> i64 {
        match source {
            Source::Empty => 0,
            Source::Whole(p) | Source::Range(p) => *p,
        }
    }

    #[test]
    fn admission_details_are_the_python_ones() {
        let mut w = windows(Some(50));
        let wall = w.wall(Some(10_000));
        w.check(1000, wall).unwrap();
        w.advance(1000);
        let late = w.check(899, wall).unwrap_err();
        assert!(late.late);
        assert_eq!(late.detail, "time 899 < stream time 1000 - retention 100");
        w.check(900, wall).unwrap();
        let ahead = w.check(1100, wall).unwrap_err();
        assert_eq!(
            ahead.detail,
            "time 1100 > stream time 1000 + max_future_skew 50, and > the previous event's \
             time 900 + max_future_skew"
        );
        w.check(1120, wall).unwrap(); // confirmed by the previous (refused) event
        let clock = w.check(11_001, wall).unwrap_err();
        assert_eq!(
            clock.detail,
            "time 11001 > the worker's clock 10000 + max_wall_clock_skew 1000"
        );
    }

    #[test]
    fn windows_evictions_and_the_sweep_follow_a_brute_force_model() {
        let mut w = windows(None);
        let mut model: Vec<(String, Time, i64)> = Vec::new();
        let mut seed = 7u64;
        for step in 0..3000 {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let key = format!("k{}", (seed >> 33) % 5);
            let jitter = ((seed >> 40) % 150) as i64;
            let t = step as i64 - jitter;
            if w.check(t, None).is_err() {
                continue;
            }
            w.advance(t);
            let (stored, evicted) = w.insert_one(&key, t, 1 + (seed >> 50) as i64 % 7);
            let s = w.stream_time.unwrap();
            model.push((key.clone(), t, 1 + (seed >> 50) as i64 % 7));
            let expected: i64 = model
                .iter()
                .filter(|(k, x, _)| *k == key && *x == t)
                .map(|(_, _, v)| v)
                .sum();
            assert_eq!(stored, expected);
            assert!(evicted.iter().all(|&x| x < s - 100));
            if step % 97 == 0 {
                w.sweep();
            }
            for (start, end, source) in w.windows_of(&key) {
                let brute: i64 = model
                    .iter()
                    .filter(|(k, x, _)| *k == key && start <= *x && *x <= end && *x >= s - 100)
                    .map(|(_, _, v)| v)
                    .sum();
                assert_eq!(value(&source), brute, "window [{start}, {end}] of {key}");
            }
        }
        w.sweep();
        let s = w.stream_time.unwrap();
        for key in w.keys() {
            assert!(w.entries(key).iter().all(|&(t, _)| t >= s - 100));
        }
    }

    #[test]
    fn a_group_reports_the_partial_after_each_event() {
        let mut w = windows(None);
        w.advance(5);
        w.insert_one("a", 5, 10);
        let group = Group {
            times: vec![7, 5, 7, 6],
            partials: vec![1, 2, 3, 4],
            slots: vec![0, 1, 2, 3],
        };
        let mut effects = vec![1, 2, 3, 4];
        w.advance(7);
        w.insert_group("a", group, &mut effects);
        assert_eq!(effects, vec![1, 12, 4, 4]);
        assert_eq!(w.entries("a"), vec![(5, 12), (6, 4), (7, 4)]);
    }
}
