//! `emit=event`'s aggregate records written straight from the native partials: each part's
//! `lower` as the Python built-in computes it (`stores.monoids`: `mean`'s true division,
//! the stddevs' `sqrt(max(M2, 0.0) / n)`, `geomean`'s `exp`...) and the record's JSON as
//! `agents.records.AggregateEncoder` writes it (orjson's layout), with no Python object made.
//! Wherever the Python result could differ (an int beyond 2^53 divided, an `exp` that
//! overflows, an int sum beyond int64, a field of an unexpected type) `write` answers false
//! and the caller takes the Python path (`lower`, then the encoder) for that record, so the
//! bytes are always the Python path's. O(windows × parts) per record.

use crate::fiba::Time;
use crate::json_text::{push_orjson_float, push_str};
use crate::monoids::{Kind, Spec, Val};
use crate::windows::Source;

/// A lowered value the record holds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Low {
    Null,
    Int(i64),
    Float(f64),
}

/// Ints that convert to float exactly (Python's int true division takes the plain float
/// division for operands within this bound, `long_true_divide`).
const EXACT_INT: i64 = 1 << 53;

fn low(v: Val) -> Option<Low> {
    match v {
        Val::None => Some(Low::Null),
        Val::Int(x) => Some(Low::Int(x)),
        Val::Float(x) => Some(Low::Float(x)),
        Val::Empty | Val::Overflow => None,
    }
}

/// Python's `a + b` on an int or float (an int beyond int64: unsure).
fn py_add(a: Val, b: Val) -> Option<Val> {
    Some(match (a, b) {
        (Val::Int(x), Val::Int(y)) => Val::Int(x.checked_add(y)?),
        (Val::Int(x), Val::Float(y)) => Val::Float(x as f64 + y),
        (Val::Float(x), Val::Int(y)) => Val::Float(x + y as f64),
        (Val::Float(x), Val::Float(y)) => Val::Float(x + y),
        _ => return None,
    })
}

/// Python's `a / n` for a count `n > 0`: a float's division, or an int's correctly rounded
/// one (the plain float division within 2^53, else unsure).
fn py_div(a: Val, n: i64) -> Option<f64> {
    if n > EXACT_INT {
        return None;
    }
    match a {
        Val::Float(x) => Some(x / n as f64),
        Val::Int(x) if x.unsigned_abs() <= EXACT_INT as u64 => Some(x as f64 / n as f64),
        _ => None,
    }
}

/// `math.sqrt(max(m2, 0.0) / n)`: `max` keeps `m2` unless `0.0 > m2` (NaN and -0.0 stay).
fn stddev(m2: Val, n: i64) -> Option<Low> {
    let Val::Float(m2) = m2 else {
        return None;
    };
    let m2 = if 0.0 > m2 { 0.0 } else { m2 };
    Some(Low::Float((m2 / n as f64).sqrt()))
}

/// The lowered value of one part over its fields `f`, as its Python `lower` computes it;
/// None when unsure.
pub fn lower_part(kind: Kind, f: &[Val]) -> Option<Low> {
    match kind {
        Kind::Count | Kind::Sum | Kind::Min | Kind::Max => low(f[0]),
        Kind::First | Kind::Last => match f[0] {
            Val::Empty => Some(Low::Null),
            v => low(v),
        },
        Kind::Maxcount | Kind::Mincount => low(f[1]),
        Kind::Mean | Kind::Geomean => {
            let Val::Int(n) = f[0] else {
                return None;
            };
            if n == 0 {
                return Some(Low::Null);
            }
            let mean = py_div(py_add(f[1], f[2])?, n)?;
            if kind == Kind::Mean {
                return Some(Low::Float(mean));
            }
            let r = mean.exp();
            // math.exp raises OverflowError for an infinite result of a finite argument
            (r.is_finite() || !mean.is_finite()).then_some(Low::Float(r))
        }
        Kind::PopStddev => match f[0] {
            Val::Int(0) => Some(Low::Null),
            Val::Int(n) if n > 0 => stddev(f[2], n),
            _ => None,
        },
        Kind::SampleStddev => match f[0] {
            Val::Int(n) if n > 1 => stddev(f[2], n - 1),
            Val::Int(_) => Some(Low::Null),
            _ => None,
        },
    }
}

fn push_low(out: &mut Vec<u8>, v: Low) {
    match v {
        Low::Null => out.extend_from_slice(b"null"),
        Low::Int(x) => out.extend_from_slice(itoa::Buffer::new().format(x).as_bytes()),
        Low::Float(x) if x.is_finite() => push_orjson_float(out, x),
        Low::Float(_) => out.extend_from_slice(b"null"),
    }
}

fn push_int(out: &mut Vec<u8>, x: i64) {
    out.extend_from_slice(itoa::Buffer::new().format(x).as_bytes());
}

/// How the records of one configuration are written: the JSON texts of the window names
/// and of the aggregates' names, the part each aggregate and `count` lower, the input
/// partition's text. Built once per `apply_events` call.
pub struct Layout {
    /// Per window, `"name":{"start":`.
    windows: Vec<Vec<u8>>,
    /// The part `count` lowers.
    count: usize,
    /// The aggregates in the order written: `"name":` and the part.
    aggregates: Vec<(Vec<u8>, usize)>,
    /// `,"input_partition":P,"input_offset":`.
    tail: Vec<u8>,
}

impl Layout {
    /// The layout for windows named `windows`, parts named `parts` (the compose's lowered
    /// dict's keys, in order), a record's `aggregates` being every part when `whole`, else
    /// the parts named `aggregations` in that order, and the input partition `partition`
    /// (its JSON text). None when a record could not be written natively: two windows of
    /// one name (the Python dict keeps one), no `count` part, an aggregation that names no
    /// part (the Python encoder raises).
    pub fn new(
        windows: &[&str],
        parts: &[&str],
        whole: bool,
        aggregations: &[&str],
        partition: &[u8],
    ) -> Option<Layout> {
        let mut texts: Vec<Vec<u8>> = Vec::with_capacity(windows.len());
        for name in windows {
            let mut text = Vec::new();
            push_str(&mut text, name);
            if texts
                .iter()
                .any(|t| t[..t.len() - b":{\"start\":".len()] == text[..])
            {
                return None;
            }
            text.extend_from_slice(b":{\"start\":");
            texts.push(text);
        }
        let part = |name: &str| parts.iter().position(|&p| p == name);
        let named = |name: &str| {
            let mut text = Vec::new();
            push_str(&mut text, name);
            text.push(b':');
            text
        };
        let aggregates = if whole {
            parts
                .iter()
                .enumerate()
                .map(|(i, p)| (named(p), i))
                .collect()
        } else {
            aggregations
                .iter()
                .map(|a| part(a).map(|i| (named(a), i)))
                .collect::<Option<Vec<_>>>()?
        };
        let mut tail = b"},\"input_partition\":".to_vec();
        tail.extend_from_slice(partition);
        tail.extend_from_slice(b",\"input_offset\":");
        Some(Layout {
            windows: texts,
            count: part("count")?,
            aggregates,
            tail,
        })
    }

    /// Write into `out` (cleared first) the record of `key` after its event at `event_ts`,
    /// at `stream_time`, its windows `windows` (`Source::Empty`: the `identity` partial),
    /// answering the input record at `offset`: byte for byte the Python encoder's of the
    /// Python-lowered windows. False (and `out` unspecified) when unsure of a value.
    #[allow(clippy::too_many_arguments)]
    pub fn write<P: AsRef<[Val]>>(
        &self,
        out: &mut Vec<u8>,
        spec: &Spec,
        key: &str,
        event_ts: i64,
        stream_time: i64,
        windows: &[(Time, Time, Source<P>)],
        identity: &[Val],
        offset: i64,
    ) -> bool {
        out.clear();
        out.extend_from_slice(b"{\"key\":");
        push_str(out, key);
        out.extend_from_slice(b",\"event_ts\":");
        push_int(out, event_ts);
        out.extend_from_slice(b",\"stream_time\":");
        push_int(out, stream_time);
        out.extend_from_slice(b",\"windows\":{");
        for (i, ((start, end, source), name)) in windows.iter().zip(&self.windows).enumerate() {
            let fields = match source {
                Source::Empty => identity,
                Source::Whole(p) | Source::Range(p) => p.as_ref(),
            };
            let lowered = |part: usize| {
                let (kind, o) = spec.parts[part];
                lower_part(kind, &fields[o..o + kind.width()])
            };
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(name);
            push_int(out, *start);
            out.extend_from_slice(b",\"end\":");
            push_int(out, *end);
            out.extend_from_slice(b",\"count\":");
            let Some(count) = lowered(self.count) else {
                return false;
            };
            push_low(out, count);
            out.extend_from_slice(b",\"aggregates\":{");
            for (j, (name, part)) in self.aggregates.iter().enumerate() {
                if j > 0 {
                    out.push(b',');
                }
                out.extend_from_slice(name);
                let Some(value) = lowered(*part) else {
                    return false;
                };
                push_low(out, value);
            }
            out.extend_from_slice(b"}}");
        }
        out.extend_from_slice(&self.tail);
        push_int(out, offset);
        out.push(b'}');
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lowered(kind: Kind, f: &[Val]) -> Option<Low> {
        lower_part(kind, f)
    }

    #[test]
    fn lowers_as_the_python_built_ins() {
        use Val::{Empty, Float, Int, None as Nil};
        assert_eq!(lowered(Kind::Sum, &[Int(7)]), Some(Low::Int(7)));
        assert_eq!(lowered(Kind::Max, &[Nil]), Some(Low::Null));
        assert_eq!(lowered(Kind::First, &[Empty]), Some(Low::Null));
        assert_eq!(lowered(Kind::Last, &[Float(2.5)]), Some(Low::Float(2.5)));
        assert_eq!(
            lowered(Kind::Maxcount, &[Int(3), Int(2)]),
            Some(Low::Int(2))
        );
        // mean: (s + c) / n, ints divided as Python's correctly rounded true division
        assert_eq!(
            lowered(Kind::Mean, &[Int(0), Int(0), Int(0)]),
            Some(Low::Null)
        );
        assert_eq!(
            lowered(Kind::Mean, &[Int(3), Int(1), Int(0)]),
            Some(Low::Float(1.0 / 3.0))
        );
        assert_eq!(
            lowered(Kind::Mean, &[Int(2), Float(1.5), Int(0)]),
            Some(Low::Float(0.75))
        );
        assert_eq!(lowered(Kind::Mean, &[Int(3), Int(1 << 54), Int(1)]), None);
        assert_eq!(lowered(Kind::Mean, &[Int(1), Val::Overflow, Int(0)]), None);
        // stddevs: max(M2, 0.0) keeps NaN and -0.0; sample needs n > 1
        assert_eq!(
            lowered(Kind::PopStddev, &[Int(4), Float(1.0), Float(-1.0)]),
            Some(Low::Float(0.0))
        );
        let neg_zero = lowered(Kind::PopStddev, &[Int(2), Float(1.0), Float(-0.0)]);
        assert!(matches!(neg_zero, Some(Low::Float(x)) if x == 0.0 && x.is_sign_negative()));
        assert_eq!(
            lowered(Kind::SampleStddev, &[Int(1), Float(1.0), Float(0.0)]),
            Some(Low::Null)
        );
        assert_eq!(
            lowered(Kind::SampleStddev, &[Int(3), Float(1.0), Float(8.0)]),
            Some(Low::Float(2.0))
        );
        // geomean: exp of the mean log; an overflowing exp is the Python path's error
        assert_eq!(
            lowered(Kind::Geomean, &[Int(2), Float(0.0), Float(0.0)]),
            Some(Low::Float(1.0))
        );
        assert_eq!(
            lowered(Kind::Geomean, &[Int(1), Float(710.0), Float(0.0)]),
            None
        );
    }

    #[test]
    fn writes_the_python_encoders_layout() {
        let spec = Spec::new(&[Kind::Count, Kind::Sum, Kind::Mean]);
        let layout = Layout::new(
            &["1s", "1m"],
            &["count", "sum", "mean"],
            false,
            &["sum", "mean"],
            b"3",
        )
        .expect("a layout");
        let p = [
            Val::Int(2),
            Val::Float(1.5),
            Val::Int(2),
            Val::Float(1.5),
            Val::Float(0.0),
        ];
        let identity = [
            Val::Int(0),
            Val::Int(0),
            Val::Int(0),
            Val::Int(0),
            Val::Int(0),
        ];
        let windows = vec![(9, 10, Source::Range(p)), (-50, 10, Source::Empty)];
        let mut out = Vec::new();
        assert!(layout.write(&mut out, &spec, "k\"1", 10, 12, &windows, &identity, 77));
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "{\"key\":\"k\\\"1\",\"event_ts\":10,\"stream_time\":12,\"windows\":{\
             \"1s\":{\"start\":9,\"end\":10,\"count\":2,\"aggregates\":{\"sum\":1.5,\"mean\":0.75}},\
             \"1m\":{\"start\":-50,\"end\":10,\"count\":0,\"aggregates\":{\"sum\":0,\"mean\":null}}},\
             \"input_partition\":3,\"input_offset\":77}"
        );
        assert!(Layout::new(&["a", "a"], &["count"], true, &[], b"0").is_none());
        assert!(Layout::new(&["a"], &["sum"], true, &[], b"0").is_none());
        assert!(Layout::new(&["a"], &["count"], false, &["max"], b"0").is_none());
    }
}
