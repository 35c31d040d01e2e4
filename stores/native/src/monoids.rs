//! Native twins of the built-in monoids of `stores/monoids.py` with a fixed-size partial,
//! and their composes: a partial is an array of `N` fields (`Fields<N>`), each part of a
//! compose owning one to three of them. Every combine is the Python function's arithmetic in
//! the same order, on Python's numeric semantics (int + float converts the int as `float()`
//! does, int/float comparisons are exact), so results are bit-identical to the Python
//! monoid's for the same combine order.

use crate::fiba::Monoid;
use std::cmp::Ordering;
use std::sync::Arc;

/// One field of a partial: Python's `None`, the empty tuple of `first`/`last`, an int64, a
/// float, or `Overflow`: an int sum beyond int64 (Python's ints are unbounded), which every
/// combine keeps and which the Python API reports as `OverflowError` when it is read.
#[derive(Clone, Copy, Debug, Default)]
pub enum Val {
    #[default]
    None,
    Empty,
    Int(i64),
    Float(f64),
    Overflow,
}

impl Val {
    /// Same value and type (floats: same bits).
    pub fn same(&self, other: &Val) -> bool {
        match (self, other) {
            (Val::None, Val::None) | (Val::Empty, Val::Empty) | (Val::Overflow, Val::Overflow) => {
                true
            }
            (Val::Int(a), Val::Int(b)) => a == b,
            (Val::Float(a), Val::Float(b)) => a.to_bits() == b.to_bits(),
            _ => false,
        }
    }

    fn truthy_count(&self) -> bool {
        !matches!(self, Val::Int(0)) && !matches!(self, Val::Float(f) if *f == 0.0)
    }
}

/// A partial of `N` fields as the tree stores it: each field's 64 payload bits (an int's
/// two's complement, a float's bits) and a tag byte, unaligned: 9 bytes a field where an
/// array of `Val` takes 16 (a `sum,count,max` partial: 27 bytes instead of 48).
#[repr(C, packed)]
#[derive(Clone, Copy)]
pub struct Packed<const N: usize> {
    bits: [u64; N],
    tags: [u8; N],
}

impl<const N: usize> Packed<N> {
    #[inline]
    pub fn pack(p: &[Val; N]) -> Self {
        let mut bits = [0u64; N];
        let mut tags = [0u8; N];
        for (i, v) in p.iter().enumerate() {
            (tags[i], bits[i]) = match *v {
                Val::None => (0, 0),
                Val::Empty => (1, 0),
                Val::Int(x) => (2, x as u64),
                Val::Float(x) => (3, x.to_bits()),
                Val::Overflow => (4, 0),
            };
        }
        Packed { bits, tags }
    }

    #[inline]
    pub fn unpack(&self) -> [Val; N] {
        let (bits, tags) = (self.bits, self.tags);
        let mut out = [Val::None; N];
        for i in 0..N {
            out[i] = match tags[i] {
                0 => Val::None,
                1 => Val::Empty,
                2 => Val::Int(bits[i] as i64),
                3 => Val::Float(f64::from_bits(bits[i])),
                _ => Val::Overflow,
            };
        }
        out
    }
}

#[inline]
fn add(a: Val, b: Val) -> Val {
    match (a, b) {
        (Val::Int(x), Val::Int(y)) => x.checked_add(y).map_or(Val::Overflow, Val::Int),
        (Val::Int(x), Val::Float(y)) => Val::Float(x as f64 + y),
        (Val::Float(x), Val::Int(y)) => Val::Float(x + y as f64),
        (Val::Float(x), Val::Float(y)) => Val::Float(x + y),
        (Val::Overflow, _) | (_, Val::Overflow) => Val::Overflow,
        _ => Val::None, // lifts never put anything else in an added field
    }
}

fn sub(a: Val, b: Val) -> Val {
    match (a, b) {
        (Val::Int(x), Val::Int(y)) => x.checked_sub(y).map_or(Val::Overflow, Val::Int),
        (Val::Int(x), Val::Float(y)) => Val::Float(x as f64 - y),
        (Val::Float(x), Val::Int(y)) => Val::Float(x - y as f64),
        (Val::Float(x), Val::Float(y)) => Val::Float(x - y),
        (Val::Overflow, _) | (_, Val::Overflow) => Val::Overflow,
        _ => Val::None,
    }
}

fn abs(a: Val) -> Val {
    match a {
        Val::Int(x) => x.checked_abs().map_or(Val::Overflow, Val::Int),
        Val::Float(x) => Val::Float(x.abs()),
        other => other,
    }
}

fn as_f64(a: Val) -> f64 {
    match a {
        Val::Int(x) => x as f64,
        Val::Float(x) => x,
        _ => f64::NAN,
    }
}

/// Python's exact comparison of an int with a float (None when the float is NaN).
fn cmp_int_float(i: i64, f: f64) -> Option<Ordering> {
    if f.is_nan() {
        return None;
    }
    if f >= 9.3e18 {
        return Some(Ordering::Less);
    }
    if f <= -9.3e18 {
        return Some(Ordering::Greater);
    }
    let whole = f.trunc();
    match (i as i128).cmp(&(whole as i128)) {
        Ordering::Equal => {
            let frac = f - whole;
            Some(if frac > 0.0 {
                Ordering::Less
            } else if frac < 0.0 {
                Ordering::Greater
            } else {
                Ordering::Equal
            })
        }
        other => Some(other),
    }
}

/// Python's `a < b`, `a > b` on numbers (false when unordered).
fn partial_cmp(a: Val, b: Val) -> Option<Ordering> {
    match (a, b) {
        (Val::Int(x), Val::Int(y)) => Some(x.cmp(&y)),
        (Val::Float(x), Val::Float(y)) => x.partial_cmp(&y),
        (Val::Int(x), Val::Float(y)) => cmp_int_float(x, y),
        (Val::Float(x), Val::Int(y)) => cmp_int_float(y, x).map(Ordering::reverse),
        _ => None,
    }
}

fn lt(a: Val, b: Val) -> bool {
    partial_cmp(a, b) == Some(Ordering::Less)
}

fn gt(a: Val, b: Val) -> bool {
    partial_cmp(a, b) == Some(Ordering::Greater)
}

fn ge(a: Val, b: Val) -> bool {
    matches!(partial_cmp(a, b), Some(Ordering::Greater | Ordering::Equal))
}

/// The built-in aggregations with a native partial, by their `stores.monoids` name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Count,
    Sum,
    Min,
    Max,
    Mean,
    Geomean,
    SampleStddev,
    PopStddev,
    Maxcount,
    Mincount,
    First,
    Last,
}

impl Kind {
    /// The kind called `name`, if native.
    pub fn from_name(name: &str) -> Option<Kind> {
        Some(match name {
            "count" => Kind::Count,
            "sum" => Kind::Sum,
            "min" => Kind::Min,
            "max" => Kind::Max,
            "mean" => Kind::Mean,
            "geomean" => Kind::Geomean,
            "sample_stddev" => Kind::SampleStddev,
            "pop_stddev" => Kind::PopStddev,
            "maxcount" => Kind::Maxcount,
            "mincount" => Kind::Mincount,
            "first" => Kind::First,
            "last" => Kind::Last,
            _ => return None,
        })
    }

    /// Number of fields of its partial.
    pub fn width(self) -> usize {
        match self {
            Kind::Mean | Kind::Geomean | Kind::SampleStddev | Kind::PopStddev => 3,
            Kind::Maxcount | Kind::Mincount => 2,
            _ => 1,
        }
    }

    /// Its identity's fields.
    pub fn identity(self) -> &'static [Val] {
        match self {
            Kind::Count | Kind::Sum => &[Val::Int(0)],
            Kind::Min | Kind::Max => &[Val::None],
            Kind::Mean => &[Val::Int(0), Val::Int(0), Val::Int(0)],
            Kind::Geomean | Kind::SampleStddev | Kind::PopStddev => {
                &[Val::Int(0), Val::Float(0.0), Val::Float(0.0)]
            }
            Kind::Maxcount | Kind::Mincount => &[Val::None, Val::Int(0)],
            Kind::First | Kind::Last => &[Val::Empty],
        }
    }
}

/// A partial's layout: the parts, each with its first field.
#[derive(Debug)]
pub struct Spec {
    pub parts: Vec<(Kind, usize)>,
    pub width: usize,
}

impl Spec {
    pub fn new(kinds: &[Kind]) -> Spec {
        let mut parts = Vec::with_capacity(kinds.len());
        let mut width = 0;
        for &kind in kinds {
            parts.push((kind, width));
            width += kind.width();
        }
        Spec { parts, width }
    }
}

/// The monoid of a `Spec` over `N >= width` fields (unused fields stay `None`).
#[derive(Clone)]
pub struct Fields<const N: usize> {
    pub spec: Arc<Spec>,
}

/// Combine the part `kind` at fields `o..` of `a` and `b` into `r`: the Python function's
/// operations in its order.
#[inline]
fn combine_part(kind: Kind, o: usize, a: &[Val], b: &[Val], r: &mut [Val]) {
    match kind {
        Kind::Count | Kind::Sum => r[o] = add(a[o], b[o]),
        Kind::Min => {
            r[o] = match (a[o], b[o]) {
                (Val::None, y) => y,
                (x, Val::None) => x,
                (x, y) if !lt(y, x) => x,
                (_, y) => y,
            }
        }
        Kind::Max => {
            r[o] = match (a[o], b[o]) {
                (Val::None, y) => y,
                (x, Val::None) => x,
                (x, y) if !gt(y, x) => x,
                (_, y) => y,
            }
        }
        Kind::First => {
            r[o] = if matches!(a[o], Val::Empty) {
                b[o]
            } else {
                a[o]
            }
        }
        Kind::Last => {
            r[o] = if matches!(b[o], Val::Empty) {
                a[o]
            } else {
                b[o]
            }
        }
        Kind::Mean | Kind::Geomean => {
            let (s1, s2) = (a[o + 1], b[o + 1]);
            let s = add(s1, s2);
            let err = if ge(abs(s1), abs(s2)) {
                add(sub(s1, s), s2)
            } else {
                add(sub(s2, s), s1)
            };
            r[o] = add(a[o], b[o]);
            r[o + 1] = s;
            r[o + 2] = add(add(a[o + 2], b[o + 2]), err);
        }
        Kind::SampleStddev | Kind::PopStddev => {
            let (na, nb) = (a[o], b[o]);
            if !na.truthy_count() {
                r[o..o + 3].copy_from_slice(&b[o..o + 3]);
            } else if !nb.truthy_count() {
                r[o..o + 3].copy_from_slice(&a[o..o + 3]);
            } else {
                let n = add(na, nb);
                let (fna, fnb, fn_) = (as_f64(na), as_f64(nb), as_f64(n));
                let (a1, b1) = (as_f64(a[o + 1]), as_f64(b[o + 1]));
                let d = b1 - a1;
                r[o] = n;
                r[o + 1] = Val::Float(a1 + d * fnb / fn_);
                r[o + 2] =
                    Val::Float(as_f64(a[o + 2]) + as_f64(b[o + 2]) + d * d * fna * fnb / fn_);
            }
        }
        Kind::Maxcount | Kind::Mincount => {
            let pick = if !a[o + 1].truthy_count() {
                Some(false)
            } else if !b[o + 1].truthy_count() {
                Some(true)
            } else {
                let (better, worse) = if kind == Kind::Maxcount {
                    (gt(b[o], a[o]), gt(a[o], b[o]))
                } else {
                    (lt(b[o], a[o]), lt(a[o], b[o]))
                };
                if better {
                    Some(false)
                } else if worse {
                    Some(true)
                } else {
                    None
                }
            };
            match pick {
                Some(true) => r[o..o + 2].copy_from_slice(&a[o..o + 2]),
                Some(false) => r[o..o + 2].copy_from_slice(&b[o..o + 2]),
                None => {
                    r[o] = a[o];
                    r[o + 1] = add(a[o + 1], b[o + 1]);
                }
            }
        }
    }
}

impl<const N: usize> Monoid for Fields<N> {
    type P = [Val; N];
    type S = Packed<N>;

    #[inline]
    fn pack(&self, p: &[Val; N]) -> Packed<N> {
        Packed::pack(p)
    }

    #[inline]
    fn unpack(&self, s: &Packed<N>) -> [Val; N] {
        s.unpack()
    }

    fn identity(&self) -> [Val; N] {
        let mut out = [Val::None; N];
        for &(kind, o) in &self.spec.parts {
            let id = kind.identity();
            out[o..o + id.len()].copy_from_slice(id);
        }
        out
    }

    #[inline]
    fn combine(&self, a: &[Val; N], b: &[Val; N]) -> [Val; N] {
        let mut r = [Val::None; N];
        for &(kind, o) in &self.spec.parts {
            combine_part(kind, o, a, b, &mut r);
        }
        r
    }

    fn same(&self, a: &[Val; N], b: &[Val; N]) -> bool {
        a.iter().zip(b).all(|(x, y)| x.same(y))
    }
}

/// `sum` or `count` alone: the same partial and combine as `Fields<1>` of that kind, without
/// the loop over parts (the hot path of the commonest windows).
#[derive(Clone, Copy, Default)]
pub struct AddOne;

impl Monoid for AddOne {
    type P = [Val; 1];
    type S = [Val; 1];

    #[inline]
    fn pack(&self, p: &[Val; 1]) -> [Val; 1] {
        *p
    }

    #[inline]
    fn unpack(&self, s: &[Val; 1]) -> [Val; 1] {
        *s
    }

    #[inline]
    fn combine_stored(&self, a: &[Val; 1], b: &[Val; 1]) -> [Val; 1] {
        self.combine(a, b)
    }

    fn identity(&self) -> [Val; 1] {
        [Val::Int(0)]
    }

    #[inline]
    fn combine(&self, a: &[Val; 1], b: &[Val; 1]) -> [Val; 1] {
        [add(a[0], b[0])]
    }

    fn same(&self, a: &[Val; 1], b: &[Val; 1]) -> bool {
        a[0].same(&b[0])
    }
}

/// Why an input cannot be lifted natively.
#[derive(Debug, PartialEq)]
pub enum LiftError {
    /// Not a number (or None where allowed).
    Type(&'static str),
    /// geomean of a non-positive or NaN input.
    Value,
}

/// The fields of `lift(x)` for `kind` at `o`, `x` given as a field (`Val::None` for Python's
/// None); `count` ignores `x`.
pub fn lift_part(kind: Kind, o: usize, x: Val, r: &mut [Val]) -> Result<(), LiftError> {
    let number = matches!(x, Val::Int(_) | Val::Float(_));
    match kind {
        Kind::Count => r[o] = Val::Int(1),
        Kind::Sum => {
            if !number {
                return Err(LiftError::Type("sum takes an int or a float"));
            }
            r[o] = x;
        }
        Kind::Min | Kind::Max | Kind::First | Kind::Last => {
            if !(number || matches!(x, Val::None)) {
                return Err(LiftError::Type("takes an int, a float or None"));
            }
            r[o] = x;
        }
        Kind::Mean => {
            if !number {
                return Err(LiftError::Type("mean takes an int or a float"));
            }
            r[o] = Val::Int(1);
            r[o + 1] = x;
            r[o + 2] = Val::Int(0);
        }
        Kind::Geomean => {
            if !number {
                return Err(LiftError::Type("geomean takes an int or a float"));
            }
            if !gt(x, Val::Int(0)) {
                return Err(LiftError::Value);
            }
            r[o] = Val::Int(1);
            r[o + 1] = Val::Float(as_f64(x).ln());
            r[o + 2] = Val::Float(0.0);
        }
        Kind::SampleStddev | Kind::PopStddev => {
            if !number {
                return Err(LiftError::Type("stddev takes an int or a float"));
            }
            r[o] = Val::Int(1);
            r[o + 1] = Val::Float(as_f64(x));
            r[o + 2] = Val::Float(0.0);
        }
        Kind::Maxcount | Kind::Mincount => {
            if !number {
                return Err(LiftError::Type("maxcount/mincount take an int or a float"));
            }
            r[o] = x;
            r[o + 1] = Val::Int(1);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn int_float_comparisons_are_exact() {
        let big = (1i64 << 53) + 1;
        assert!(gt(Val::Int(big), Val::Float((1u64 << 53) as f64)));
        assert!(lt(Val::Int(1), Val::Float(1.5)));
        assert!(!lt(Val::Int(1), Val::Float(f64::NAN)));
        assert!(ge(Val::Float(2.0), Val::Int(2)));
    }

    #[test]
    fn a_packed_partial_holds_every_field_bit_for_bit() {
        let p = [
            Val::None,
            Val::Empty,
            Val::Int(i64::MIN),
            Val::Int(-1),
            Val::Float(-0.0),
            Val::Float(f64::from_bits(0x7ff8_0000_dead_beef)),
            Val::Overflow,
        ];
        let back = Packed::pack(&p).unpack();
        assert!(p.iter().zip(&back).all(|(a, b)| a.same(b)));
        assert_eq!(std::mem::size_of::<Packed<3>>(), 27);
    }

    #[test]
    fn maxcount_adds_counts_of_equal_maxima() {
        let m: Fields<2> = Fields {
            spec: Arc::new(Spec::new(&[Kind::Maxcount])),
        };
        let a = [Val::Int(3), Val::Int(2)];
        let b = [Val::Float(3.0), Val::Int(1)];
        let r = m.combine(&a, &b);
        assert!(r[0].same(&Val::Int(3)) && r[1].same(&Val::Int(3)));
        assert!(m.combine(&m.identity(), &b)[0].same(&Val::Float(3.0)));
    }
}
