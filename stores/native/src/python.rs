//! `stores._native`: the FiBA of `fiba.rs` over the native monoids, as a Python class with
//! the API of `stores.fiba.FiBA` (times are int64, e.g. milliseconds), and in-Rust benchmark
//! loops. Partials cross as the Python monoid's own partials (ints, floats, None, tuples);
//! `lower` is the Python monoid's function, called once per query, so lowered results are
//! the Python monoid's by construction. With `partials=True` (the Faust API's per-key trees)
//! an `overflow::Guard` refuses, with `OverflowError` and before any change, partials whose
//! int sums might leave int64, so that the caller moves the key to the Python FiBA.

use crate::fiba::{FiBA, Time};
use crate::monoids::{lift_part, AddOne, Fields, Kind, LiftError, Spec, Val};
use crate::overflow::Guard;
use crate::pywindows::partial_from_py;
use pyo3::exceptions::{PyAssertionError, PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyFloat, PyInt, PyIterator, PyList, PyTuple};
use std::sync::Arc;
use std::time::Instant;

enum Tree {
    Add(FiBA<AddOne>),
    F1(FiBA<Fields<1>>),
    F2(FiBA<Fields<2>>),
    F3(FiBA<Fields<3>>),
    F4(FiBA<Fields<4>>),
    F6(FiBA<Fields<6>>),
    F8(FiBA<Fields<8>>),
    F12(FiBA<Fields<12>>),
    F16(FiBA<Fields<16>>),
}

macro_rules! dispatch {
    ($tree:expr, $t:ident => $body:expr) => {
        match $tree {
            Tree::Add($t) => $body,
            Tree::F1($t) => $body,
            Tree::F2($t) => $body,
            Tree::F3($t) => $body,
            Tree::F4($t) => $body,
            Tree::F6($t) => $body,
            Tree::F8($t) => $body,
            Tree::F12($t) => $body,
            Tree::F16($t) => $body,
        }
    };
}

pub(crate) fn val_from_py(x: &Bound<'_, PyAny>) -> PyResult<Val> {
    if x.is_none() {
        Ok(Val::None)
    } else if x.is_exact_instance_of::<PyInt>() {
        Ok(Val::Int(x.extract::<i64>()?))
    } else if x.is_exact_instance_of::<PyFloat>() {
        Ok(Val::Float(x.extract::<f64>()?))
    } else {
        Err(PyTypeError::new_err(format!(
            "the native FiBA takes int (int64), float or None inputs, not {}",
            x.get_type().name()?
        )))
    }
}

pub(crate) fn val_to_py(py: Python<'_>, v: Val) -> PyResult<PyObject> {
    Ok(match v {
        Val::None => py.None(),
        Val::Empty => PyTuple::empty(py).into_any().unbind(),
        Val::Int(i) => i.into_pyobject(py)?.into_any().unbind(),
        Val::Float(f) => PyFloat::new(py, f).into_any().unbind(),
        Val::Overflow => {
            return Err(PyOverflowError::new_err(
                "an int sum of the native FiBA is beyond int64 (the Python FiBA is unbounded)",
            ))
        }
    })
}

fn lift<const N: usize>(spec: &Spec, x: &Bound<'_, PyAny>) -> PyResult<[Val; N]> {
    let mut out = [Val::None; N];
    let needs_value = spec.parts.iter().any(|&(kind, _)| kind != Kind::Count);
    let v = if needs_value {
        val_from_py(x)?
    } else {
        Val::None
    };
    for &(kind, o) in &spec.parts {
        lift_part(kind, o, v, &mut out).map_err(|error| match error {
            LiftError::Type(why) => PyTypeError::new_err(format!("native FiBA: {why}")),
            LiftError::Value => {
                let repr = x.repr().map(|r| r.to_string()).unwrap_or_default();
                PyValueError::new_err(format!(
                    "geomean is defined for positive inputs only, got {repr}"
                ))
            }
        })?;
    }
    Ok(out)
}

/// The Python partial: a part's own partial, or (compose) the flat tuple of the parts'
/// partials with the triples spliced in.
pub(crate) fn partial_to_py(
    py: Python<'_>,
    spec: &Spec,
    compose: bool,
    fields: &[Val],
) -> PyResult<PyObject> {
    let mut out: Vec<PyObject> = Vec::with_capacity(spec.width);
    for &(kind, o) in &spec.parts {
        match kind {
            Kind::Count | Kind::Sum | Kind::Min | Kind::Max => out.push(val_to_py(py, fields[o])?),
            Kind::First | Kind::Last => out.push(match fields[o] {
                Val::Empty => PyTuple::empty(py).into_any().unbind(),
                v => PyTuple::new(py, [val_to_py(py, v)?])?.into_any().unbind(),
            }),
            Kind::Maxcount | Kind::Mincount => out.push(
                PyTuple::new(
                    py,
                    [val_to_py(py, fields[o])?, val_to_py(py, fields[o + 1])?],
                )?
                .into_any()
                .unbind(),
            ),
            _ => {
                let triple = [
                    val_to_py(py, fields[o])?,
                    val_to_py(py, fields[o + 1])?,
                    val_to_py(py, fields[o + 2])?,
                ];
                if compose {
                    out.extend(triple);
                } else {
                    out.push(PyTuple::new(py, triple)?.into_any().unbind());
                }
            }
        }
    }
    if compose {
        Ok(PyTuple::new(py, out)?.into_any().unbind())
    } else {
        Ok(out.pop().expect("one part"))
    }
}

/// FiBA over a native monoid: `FiBA(kinds, lower=None, compose=False, min_arity=4)`, where
/// `kinds` names built-ins of `stores.monoids` (several for a compose) and `lower` is the
/// Python monoid's `lower` (None when it is the identity). Build it with
/// `stores.native_fiba.NativeFiBA(monoid)`.
#[pyclass(module = "stores._native", name = "FiBA")]
pub struct PyFiBA {
    tree: Tree,
    spec: Arc<Spec>,
    lower: Option<PyObject>,
    compose: bool,
    /// `insert`/`bulk_insert` take partials (a compose's flat tuples), not inputs to lift.
    partials: bool,
    /// With `partials`: the int64 guard of the tree's partials.
    guard: Option<Guard>,
}

/// Account for `partials` about to join `tree` (the guard's rule; see `overflow`), or
/// `OverflowError` when their int sums might leave int64. Nothing changes on an error.
fn guard_partials<M, const N: usize>(
    guard: Option<&mut Guard>,
    tree: &FiBA<M>,
    partials: &[(Time, [Val; N])],
) -> PyResult<()>
where
    M: crate::fiba::Monoid<P = [Val; N]>,
{
    let Some(guard) = guard else {
        return Ok(());
    };
    if tree.is_empty() {
        guard.reset();
    }
    let bound = partials
        .iter()
        .fold(1, |b, (_, p)| b.max(guard.partial_bound(p)));
    let n = partials.len() as u64;
    if !guard.fits_taken(bound, n) && !guard.fits_tree(bound, Some(&tree.query()[..]), n) {
        return Err(PyOverflowError::new_err(
            "the int sums of the native FiBA might leave int64 (the Python FiBA is unbounded)",
        ));
    }
    let counted = partials.iter().all(|(_, p)| guard.counts_one(p));
    guard.take(bound, n, counted);
    Ok(())
}

impl PyFiBA {
    fn finish(&self, py: Python<'_>, partial: PyObject) -> PyResult<PyObject> {
        match &self.lower {
            None => Ok(partial),
            Some(lower) => lower.call1(py, (partial,)),
        }
    }
}

#[pymethods]
impl PyFiBA {
    #[new]
    #[pyo3(signature = (kinds, lower=None, compose=false, min_arity=4, partials=false))]
    fn new(
        kinds: Vec<String>,
        lower: Option<PyObject>,
        compose: bool,
        min_arity: usize,
        partials: bool,
    ) -> PyResult<Self> {
        if partials && !compose {
            return Err(PyValueError::new_err("partials are a compose's"));
        }
        if min_arity < 2 {
            return Err(PyValueError::new_err(format!(
                "min_arity must be at least 2, got {min_arity}"
            )));
        }
        if kinds.is_empty() || (!compose && kinds.len() != 1) {
            return Err(PyValueError::new_err("one kind, or several for a compose"));
        }
        let kinds = kinds
            .iter()
            .map(|name| {
                Kind::from_name(name)
                    .ok_or_else(|| PyValueError::new_err(format!("no native monoid {name:?}")))
            })
            .collect::<PyResult<Vec<Kind>>>()?;
        let spec = Arc::new(Spec::new(&kinds));
        let tree = match spec.width {
            1 if matches!(kinds[..], [Kind::Sum] | [Kind::Count]) => {
                Tree::Add(FiBA::new(AddOne, min_arity))
            }
            1 => Tree::F1(FiBA::new(Fields { spec: spec.clone() }, min_arity)),
            2 => Tree::F2(FiBA::new(Fields { spec: spec.clone() }, min_arity)),
            3 => Tree::F3(FiBA::new(Fields { spec: spec.clone() }, min_arity)),
            4 => Tree::F4(FiBA::new(Fields { spec: spec.clone() }, min_arity)),
            5 | 6 => Tree::F6(FiBA::new(Fields { spec: spec.clone() }, min_arity)),
            7 | 8 => Tree::F8(FiBA::new(Fields { spec: spec.clone() }, min_arity)),
            9..=12 => Tree::F12(FiBA::new(Fields { spec: spec.clone() }, min_arity)),
            13..=16 => Tree::F16(FiBA::new(Fields { spec: spec.clone() }, min_arity)),
            width => {
                return Err(PyValueError::new_err(format!(
                    "a native partial has at most 16 fields, not {width}"
                )))
            }
        };
        Ok(PyFiBA {
            tree,
            guard: partials.then(|| Guard::new(&spec)),
            spec,
            lower,
            compose,
            partials,
        })
    }

    /// MIN_ARITY of the tree (MAX_ARITY is twice that in inner nodes, four times in leaves).
    #[getter]
    fn min_arity(&self) -> usize {
        dispatch!(&self.tree, t => t.min_arity())
    }

    /// Combines performed since creation or `reset_combines()`.
    #[getter]
    fn combines(&self) -> u64 {
        dispatch!(&self.tree, t => t.combines())
    }

    fn reset_combines(&self) {
        dispatch!(&self.tree, t => t.reset_combines())
    }

    /// Add `lift(x)` at time `t` (with `partials`, the partial `x`). Amortized O(log d), O(1)
    /// at either end.
    fn insert(&mut self, t: Time, x: &Bound<'_, PyAny>) -> PyResult<()> {
        let spec = &self.spec;
        let partials = self.partials;
        let guard = self.guard.as_mut();
        dispatch!(&mut self.tree, tree => {
            let p = if partials { partial_from_py(spec, x)? } else { lift(spec, x)? };
            guard_partials(guard, tree, &[(t, p)])?;
            tree.insert(t, p);
        });
        Ok(())
    }

    /// Remove the entry at exactly `t`; False when absent. Amortized O(log d).
    fn evict(&mut self, t: Time) -> bool {
        dispatch!(&mut self.tree, tree => tree.evict(t))
    }

    /// Remove every entry with time <= t; how many. Amortized O(log m).
    fn bulk_evict(&mut self, t: Time) -> usize {
        dispatch!(&mut self.tree, tree => tree.bulk_evict(t))
    }

    /// Insert `(t, x)` pairs in ascending time order (ValueError otherwise, before any change).
    fn bulk_insert(&mut self, pairs: &Bound<'_, PyAny>) -> PyResult<()> {
        let (spec, partials) = (&self.spec, self.partials);
        let mut items: Vec<(Time, Bound<'_, PyAny>)> = Vec::new();
        for pair in pairs.try_iter()? {
            items.push(pair?.extract()?);
        }
        for w in items.windows(2) {
            if w[1].0 < w[0].0 {
                return Err(PyValueError::new_err(format!(
                    "bulk_insert: time {} after {} is out of order",
                    w[1].0, w[0].0
                )));
            }
        }
        let guard = self.guard.as_mut();
        dispatch!(&mut self.tree, tree => {
            let lifted = items
                .iter()
                .map(|(t, x)| {
                    let p = if partials { partial_from_py(spec, x)? } else { lift(spec, x)? };
                    Ok((*t, p))
                })
                .collect::<PyResult<Vec<_>>>()?;
            guard_partials(guard, tree, &lifted)?;
            tree.bulk_insert(lifted);
        });
        Ok(())
    }

    /// The lowered aggregate of the whole window. O(1).
    fn query(&self, py: Python<'_>) -> PyResult<PyObject> {
        let partial = self.aggregate(py)?;
        self.finish(py, partial)
    }

    /// The raw partial of the whole window. O(1).
    fn aggregate(&self, py: Python<'_>) -> PyResult<PyObject> {
        dispatch!(&self.tree, tree => partial_to_py(py, &self.spec, self.compose, &tree.query()))
    }

    /// The lowered aggregate of the entries with t_from <= t <= t_to.
    fn query_range(&self, py: Python<'_>, t_from: Time, t_to: Time) -> PyResult<PyObject> {
        let partial = self.aggregate_range(py, t_from, t_to)?;
        self.finish(py, partial)
    }

    /// The raw partial of the entries with t_from <= t <= t_to. O(log n).
    fn aggregate_range(&self, py: Python<'_>, t_from: Time, t_to: Time) -> PyResult<PyObject> {
        dispatch!(&self.tree, tree => partial_to_py(py, &self.spec, self.compose, &tree.query_range(t_from, t_to)))
    }

    fn __len__(&self) -> usize {
        dispatch!(&self.tree, tree => tree.len())
    }

    fn __contains__(&self, t: Time) -> bool {
        dispatch!(&self.tree, tree => tree.get(t).is_some())
    }

    /// The partial stored at `t`, or None. O(log d).
    fn get(&self, py: Python<'_>, t: Time) -> PyResult<PyObject> {
        dispatch!(&self.tree, tree => match tree.get(t) {
            Some(p) => partial_to_py(py, &self.spec, self.compose, &p),
            None => Ok(py.None()),
        })
    }

    /// The smallest time, or None. O(1).
    fn oldest(&self) -> Option<Time> {
        dispatch!(&self.tree, tree => tree.oldest())
    }

    /// The largest time, or None. O(1).
    fn youngest(&self) -> Option<Time> {
        dispatch!(&self.tree, tree => tree.youngest())
    }

    /// `[(t, partial), ...]` in time order. O(n).
    fn items<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let list = PyList::empty(py);
        dispatch!(&self.tree, tree => {
            for (t, p) in tree.items() {
                list.append((t, partial_to_py(py, &self.spec, self.compose, &p)?))?;
            }
        });
        Ok(list)
    }

    /// Iterate `(t, partial)` in time order (over a snapshot: `items()`).
    fn __iter__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyIterator>> {
        PyIterator::from_object(self.items(py)?.as_any())
    }

    /// Remove every entry.
    fn clear(&mut self) {
        dispatch!(&mut self.tree, tree => tree.clear())
    }

    /// Verify the whole structure in O(n); AssertionError naming the broken invariant.
    fn check_invariants(&self) -> PyResult<()> {
        dispatch!(&self.tree, tree => tree.check_invariants()).map_err(PyAssertionError::new_err)
    }

    fn __repr__(&self) -> String {
        format!(
            "<native FiBA min_arity={} len={}>",
            self.min_arity(),
            self.__len__()
        )
    }
}

/// What `FiBA(["sum"])` holds after inserting 1 at each of `times` (in their order), its
/// combine count then reset: the window a bench loop starts from.
fn filled_sum_tree(min_arity: usize, times: impl Iterator<Item = i64>) -> FiBA<AddOne> {
    let mut tree = FiBA::new(AddOne, min_arity);
    for t in times {
        tree.insert(t, [Val::Int(1)]);
    }
    tree.reset_combines();
    tree
}

fn checksum(p: &[Val; 1]) -> i64 {
    match p[0] {
        Val::Int(i) => i,
        _ => -1,
    }
}

/// In-order rounds inside Rust, with the sum monoid the Python class uses: a window of `n`,
/// then `rounds` times evict the oldest, insert the youngest, query. Returns
/// `(seconds, combines, checksum)`.
#[pyfunction]
#[pyo3(signature = (n, rounds, min_arity=4))]
fn bench_in_order(py: Python<'_>, n: i64, rounds: i64, min_arity: usize) -> (f64, u64, i64) {
    py.allow_threads(|| {
        let mut tree = filled_sum_tree(min_arity, 0..n);
        let one = [Val::Int(1)];
        let mut check = 0i64;
        let start = Instant::now();
        for t in n..n + rounds {
            tree.evict(t - n);
            tree.insert(t, one);
            check += checksum(&tree.query());
        }
        (start.elapsed().as_secs_f64(), tree.combines(), check)
    })
}

/// Out-of-order rounds at distance `d` (the papers' generator: `d` high times stay at the
/// young end, low times arrive in order just below them, the oldest is evicted).
#[pyfunction]
#[pyo3(signature = (n, d, rounds, min_arity=4))]
fn bench_out_of_order(
    py: Python<'_>,
    n: i64,
    d: i64,
    rounds: i64,
    min_arity: usize,
) -> (f64, u64, i64) {
    py.allow_threads(|| {
        let high = 1i64 << 40;
        let mut tree = filled_sum_tree(min_arity, (0..n - d).chain(high..high + d));
        let one = [Val::Int(1)];
        let mut check = 0i64;
        let start = Instant::now();
        for low in n - d..n - d + rounds {
            tree.evict(low - (n - d));
            tree.insert(low, one);
            check += checksum(&tree.query());
        }
        (start.elapsed().as_secs_f64(), tree.combines(), check)
    })
}

/// Bulk rounds: a window of `n`; each round bulk-inserts `m` younger entries (in order) and
/// bulk-evicts the `m` oldest, then queries. Returns `(seconds, combines, checksum)`.
#[pyfunction]
#[pyo3(signature = (n, m, rounds, min_arity=4))]
fn bench_bulk(py: Python<'_>, n: i64, m: i64, rounds: i64, min_arity: usize) -> (f64, u64, i64) {
    py.allow_threads(|| {
        let mut tree = filled_sum_tree(min_arity, 0..n);
        let one = [Val::Int(1)];
        let mut check = 0i64;
        let mut next = n;
        let start = Instant::now();
        for _ in 0..rounds {
            tree.bulk_insert((next..next + m).map(|t| (t, one)).collect());
            next += m;
            tree.bulk_evict(next - n - 1);
            check += checksum(&tree.query());
        }
        (start.elapsed().as_secs_f64(), tree.combines(), check)
    })
}

/// Whether this module was built with debug assertions (the invariant checker after every
/// operation).
#[pyfunction]
fn debug_build() -> bool {
    cfg!(debug_assertions)
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyFiBA>()?;
    m.add_class::<crate::pywindows::PyKeyWindows>()?;
    m.add_function(wrap_pyfunction!(bench_in_order, m)?)?;
    m.add_function(wrap_pyfunction!(bench_out_of_order, m)?)?;
    m.add_function(wrap_pyfunction!(bench_bulk, m)?)?;
    m.add_function(wrap_pyfunction!(debug_build, m)?)?;
    crate::py_io::register(m)?;
    crate::state_codec::python::register(m)?;
    crate::changelog_layouts::python::register(m)?;
    crate::store_writes::python::register(m)?;
    crate::pending_writes::python::register(m)?;
    crate::record_batch::python::register(m)?;
    crate::fetched_records::python::register(m)?;
    Ok(())
}
