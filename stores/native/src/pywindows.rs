//! `stores._native.KeyWindows`: the per-key windows of `windows.rs` over the native composed
//! monoids, for the Python front `stores.native_windows.NativeKeyWindows`. A batch crosses in
//! one call; partials cross as the Python compose's flat tuples; `lower` (the compose's),
//! `lift` (`WindowConfig.lift`, asked only for values without a native lift, and for the
//! detail of a refused one) and `Rejected` are the Python objects, so refusals and lowered
//! results are the Python path's by construction. An `overflow::Guard` over the partition
//! answers None (nothing changed) for a batch or an event whose int sums might leave int64,
//! and an `OverflowError` for such a `load`, so the front moves the state to the Python path.

use crate::event_records::Layout;
use crate::events::{Key, Outcome};
use crate::fetched_records::python::PyFetchedRecords;
use crate::fiba::Time;
use crate::monoids::{lift_part, AddOne, Fields, Kind, Spec, Val};
use crate::overflow::{fits, Guard};
use crate::py_io::{json_text_of, plain_strs, value_to_py, PyAggregateEncoder, PyEventParser};
use crate::python::{partial_to_py, val_from_py, val_to_py};
use crate::record_batch::python::PyKeyedRecords;
use crate::store_writes::marshal_fields;
use crate::store_writes::python::{EffectsData, PyEffects};
use crate::windows::{Group, Rejection, Settings, Source, Windows};
use pyo3::exceptions::{PyKeyError, PyOverflowError, PyRuntimeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use serde_json::Value;
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

enum Core {
    Add(Windows<AddOne>),
    F1(Windows<Fields<1>>),
    F2(Windows<Fields<2>>),
    F3(Windows<Fields<3>>),
    F4(Windows<Fields<4>>),
    F6(Windows<Fields<6>>),
    F8(Windows<Fields<8>>),
    F9(Windows<Fields<9>>),
    F12(Windows<Fields<12>>),
    F16(Windows<Fields<16>>),
}

macro_rules! with_core {
    ($core:expr, $w:ident => $body:expr) => {
        match $core {
            Core::Add($w) => $body,
            Core::F1($w) => $body,
            Core::F2($w) => $body,
            Core::F3($w) => $body,
            Core::F4($w) => $body,
            Core::F6($w) => $body,
            Core::F8($w) => $body,
            Core::F9($w) => $body,
            Core::F12($w) => $body,
            Core::F16($w) => $body,
        }
    };
}

impl Core {
    /// The kernel for `kinds` (their `spec`), its partials `N` fields wide, `N` the smallest
    /// of the built widths at or above the compose's width: exact up to 9 (the default
    /// compose `count,sum,max,mean,pop_stddev` is 9 fields), then 12 and 16. Every walk copies
    /// whole partials, so a wider `N` costs copies and memory per entry.
    fn new(kinds: &[Kind], spec: &Arc<Spec>, cfg: Settings, min_arity: usize) -> PyResult<Core> {
        Ok(match spec.width {
            1 if matches!(kinds, [Kind::Sum] | [Kind::Count]) => {
                Core::Add(Windows::new(AddOne, cfg, min_arity))
            }
            1 => Core::F1(Windows::new(Fields { spec: spec.clone() }, cfg, min_arity)),
            2 => Core::F2(Windows::new(Fields { spec: spec.clone() }, cfg, min_arity)),
            3 => Core::F3(Windows::new(Fields { spec: spec.clone() }, cfg, min_arity)),
            4 => Core::F4(Windows::new(Fields { spec: spec.clone() }, cfg, min_arity)),
            5 | 6 => Core::F6(Windows::new(Fields { spec: spec.clone() }, cfg, min_arity)),
            7 | 8 => Core::F8(Windows::new(Fields { spec: spec.clone() }, cfg, min_arity)),
            9 => Core::F9(Windows::new(Fields { spec: spec.clone() }, cfg, min_arity)),
            10..=12 => Core::F12(Windows::new(Fields { spec: spec.clone() }, cfg, min_arity)),
            13..=16 => Core::F16(Windows::new(Fields { spec: spec.clone() }, cfg, min_arity)),
            width => {
                return Err(PyValueError::new_err(format!(
                    "a native partial has at most 16 fields, not {width}"
                )))
            }
        })
    }

    /// `N`: the fields of the partials this kernel stores and copies.
    fn partial_width(&self) -> usize {
        match self {
            Core::Add(_) | Core::F1(_) => 1,
            Core::F2(_) => 2,
            Core::F3(_) => 3,
            Core::F4(_) => 4,
            Core::F6(_) => 6,
            Core::F8(_) => 8,
            Core::F9(_) => 9,
            Core::F12(_) => 12,
            Core::F16(_) => 16,
        }
    }
}

/// The Python objects the kernel works with.
struct Ctx {
    spec: Arc<Spec>,
    /// Some part reads the value (not `count` alone).
    needs_value: bool,
    lift: PyObject,
    lower: PyObject,
    empty: PyObject,
    rejected: PyObject,
    names: Vec<PyObject>,
    /// The compose's part names (its lowered dict's keys, in order), when given: records
    /// are then written from the native partials (`event_records`).
    parts: Option<Vec<String>>,
}

/// A value with a native lift: an int within int64, a float or None; `None` otherwise.
fn native_value(x: &Bound<'_, PyAny>) -> Option<Val> {
    if x.is_exact_instance_of::<PyInt>() {
        x.extract::<i64>().ok().map(Val::Int)
    } else if x.is_exact_instance_of::<PyFloat>() {
        x.extract::<f64>().ok().map(Val::Float)
    } else if x.is_none() {
        Some(Val::None)
    } else {
        None
    }
}

fn lift_native<const N: usize>(spec: &Spec, v: Val) -> Option<[Val; N]> {
    let mut out = [Val::None; N];
    for &(kind, o) in &spec.parts {
        lift_part(kind, o, v, &mut out).ok()?;
    }
    Some(out)
}

/// What the Python lift says of `x`: None when it takes it, else the `Rejected` raised.
fn python_refusal(py: Python<'_>, ctx: &Ctx, x: &Bound<'_, PyAny>) -> PyResult<Option<PyObject>> {
    match ctx.lift.call1(py, (x,)) {
        Ok(_) => Ok(None),
        Err(err) if err.is_instance(py, ctx.rejected.bind(py)) => {
            Ok(Some(err.value(py).clone().into_any().unbind()))
        }
        Err(err) => Err(err),
    }
}

/// How a value lifts: natively, refused (the Python `Rejected`), or not native (the
/// Python lift takes it but the native partial cannot hold it).
enum Lift<const N: usize> {
    Native([Val; N]),
    Refused(PyObject),
    NotNative,
}

fn lift_value<const N: usize>(
    py: Python<'_>,
    ctx: &Ctx,
    x: &Bound<'_, PyAny>,
) -> PyResult<Lift<N>> {
    if !ctx.needs_value {
        return Ok(Lift::Native(
            lift_native(&ctx.spec, Val::None).expect("count lifts anything"),
        ));
    }
    match native_value(x) {
        Some(v @ (Val::Int(_) | Val::Float(_))) => match lift_native(&ctx.spec, v) {
            Some(p) => Ok(Lift::Native(p)),
            None => match python_refusal(py, ctx, x)? {
                Some(rejected) => Ok(Lift::Refused(rejected)),
                None => Err(PyRuntimeError::new_err(
                    "the native and the Python lift disagree on a number",
                )),
            },
        },
        other => Ok(match python_refusal(py, ctx, x)? {
            Some(rejected) => Lift::Refused(rejected),
            None => match other.and_then(|v| lift_native(&ctx.spec, v)) {
                Some(p) => Lift::Native(p),
                None => Lift::NotNative,
            },
        }),
    }
}

fn rejected_obj(py: Python<'_>, ctx: &Ctx, r: Rejection) -> PyResult<PyObject> {
    let reason = if r.late { "late" } else { "future" };
    ctx.rejected.call1(py, (reason, r.detail))
}

/// The Python partial of fields `p` (the compose's flat tuple).
fn to_py(py: Python<'_>, ctx: &Ctx, p: &[Val]) -> PyResult<PyObject> {
    partial_to_py(py, &ctx.spec, true, p)
}

/// The fields of a Python compose partial (a flat tuple, triples spliced in).
pub(crate) fn partial_from_py<const N: usize>(
    spec: &Spec,
    obj: &Bound<'_, PyAny>,
) -> PyResult<[Val; N]> {
    let items = obj.downcast::<PyTuple>()?;
    let mut out = [Val::None; N];
    let mut i = 0;
    let item = |i: usize| -> PyResult<Bound<'_, PyAny>> {
        items.get_item(i).map_err(|_| {
            PyValueError::new_err(format!(
                "a partial of {} fields, not the compose's",
                items.len()
            ))
        })
    };
    for &(kind, o) in &spec.parts {
        match kind {
            Kind::Count | Kind::Sum | Kind::Min | Kind::Max => {
                out[o] = val_from_py(&item(i)?)?;
                i += 1;
            }
            Kind::First | Kind::Last => {
                let part = item(i)?;
                let part = part.downcast::<PyTuple>()?;
                out[o] = match part.len() {
                    0 => Val::Empty,
                    1 => val_from_py(&part.get_item(0)?)?,
                    n => return Err(PyValueError::new_err(format!("a first/last of {n} items"))),
                };
                i += 1;
            }
            Kind::Maxcount | Kind::Mincount => {
                let part = item(i)?;
                let (x, n): (Bound<'_, PyAny>, Bound<'_, PyAny>) = part.extract()?;
                out[o] = val_from_py(&x)?;
                out[o + 1] = val_from_py(&n)?;
                i += 1;
            }
            _ => {
                for j in 0..3 {
                    out[o + j] = val_from_py(&item(i + j)?)?;
                }
                i += 3;
            }
        }
    }
    if i != items.len() {
        return Err(PyValueError::new_err(format!(
            "a partial of {} fields, not {i}",
            items.len()
        )));
    }
    Ok(out)
}

fn lowered(py: Python<'_>, ctx: &Ctx, source: &Source<impl AsRef<[Val]>>) -> PyResult<PyObject> {
    match source {
        Source::Empty => Ok(ctx.empty.clone_ref(py)),
        Source::Whole(p) | Source::Range(p) => ctx.lower.call1(py, (to_py(py, ctx, p.as_ref())?,)),
    }
}

/// `[(name, start, end, lowered)]`, the whole window's lowered result computed once.
fn lowered_list<const N: usize>(
    py: Python<'_>,
    ctx: &Ctx,
    windows: Vec<(Time, Time, Source<[Val; N]>)>,
) -> PyResult<PyObject> {
    let list = PyList::empty(py);
    let mut whole: Option<PyObject> = None;
    for (i, (start, end, source)) in windows.into_iter().enumerate() {
        let value = match &source {
            Source::Whole(_) => match &whole {
                Some(w) => w.clone_ref(py),
                None => {
                    let w = lowered(py, ctx, &source)?;
                    whole = Some(w.clone_ref(py));
                    w
                }
            },
            _ => lowered(py, ctx, &source)?,
        };
        list.append((ctx.names[i].clone_ref(py), start, end, value))?;
    }
    Ok(list.into_any().unbind())
}

fn times_tuple(py: Python<'_>, times: Vec<Time>) -> PyResult<PyObject> {
    Ok(PyTuple::new(py, times)?.into_any().unbind())
}

type Applied = (PyObject, PyObject, PyObject);

/// How `apply_events` writes its records natively for `encoder` and input `partition`, or
/// None (the Python lower and the encoder write them): the part names were not given, a
/// name is not a plain str, or `Layout::new` refuses.
fn record_layout(
    ctx: &Ctx,
    py: Python<'_>,
    encoder: &PyAggregateEncoder,
    partition: &Bound<'_, PyAny>,
) -> Option<Layout> {
    let parts: Vec<&str> = ctx.parts.as_ref()?.iter().map(String::as_str).collect();
    let windows = plain_strs(py, &ctx.names)?;
    let (aggregations, whole) = encoder.layout(py)?;
    let partition = json_text_of(partition)?;
    Layout::new(&windows, &parts, whole, &aggregations, &partition)
}

/// Whether each key's tree can take its events of a batch (values within `bound`) without
/// an int sum leaving int64, counted per key (`Guard::fits_tree`). O(keys of the batch).
fn keys_fit<const N: usize, M>(guard: &Guard, w: &Windows<M>, keys: &[&str], bound: u64) -> bool
where
    M: crate::fiba::Monoid<P = [Val; N]> + Clone,
{
    let mut events: HashMap<&str, u64> = HashMap::new();
    for key in keys {
        *events.entry(key).or_default() += 1;
    }
    events.into_iter().all(|(key, n)| {
        let total = w.total(key);
        guard.fits_tree(bound, total.as_ref().map(|p| &p[..]), n)
    })
}

/// An event's value: a number read natively from the input's JSON, or a Python object.
enum EventValue<'py> {
    Number(Val),
    Object(Bound<'py, PyAny>),
}

impl EventValue<'_> {
    /// The value when it has a native lift: an int within int64, a float or None.
    fn native(&self) -> Option<Val> {
        match self {
            EventValue::Number(v) => Some(*v),
            EventValue::Object(x) => native_value(x),
        }
    }
}

/// An event's tag: a Python object (`apply`), or an input offset made a Python int only
/// where an output names it (`apply_fetched`).
enum Tag<'py> {
    Object(Bound<'py, PyAny>),
    Offset(i64),
}

impl<'py> Tag<'py> {
    fn object(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        match self {
            Tag::Object(x) => Ok(x.clone()),
            Tag::Offset(o) => Ok(o.into_pyobject(py)?.into_any()),
        }
    }
}

/// One event of a batch, however it reached the kernel.
struct BatchEvent<'a, 'py> {
    key: Cow<'a, str>,
    ts: i64,
    value: EventValue<'py>,
    tag: Tag<'py>,
}

/// How `value` lifts (`lift_value`), a number without a Python object unless its native
/// lift fails (the Python lift then says why).
fn lift_event<const N: usize>(
    py: Python<'_>,
    ctx: &Ctx,
    value: &EventValue<'_>,
) -> PyResult<Lift<N>> {
    match value {
        EventValue::Object(x) => lift_value(py, ctx, x),
        EventValue::Number(v) => {
            let v = if ctx.needs_value { *v } else { Val::None };
            match lift_native(&ctx.spec, v) {
                Some(p) => Ok(Lift::Native(p)),
                None => lift_value(py, ctx, val_to_py(py, v)?.bind(py)),
            }
        }
    }
}

/// One batch (see `PyKeyWindows::apply`); None when a value has no native partial.
#[allow(clippy::too_many_arguments)]
fn apply_batch<const N: usize, M>(
    py: Python<'_>,
    ctx: &Ctx,
    guard: &mut Guard,
    w: &mut Windows<M>,
    events: &Bound<'_, PyAny>,
    tags: &Bound<'_, PyAny>,
    now_ms: Option<i64>,
    encoded: bool,
) -> PyResult<Option<Applied>>
where
    M: crate::fiba::Monoid<P = [Val; N]> + Clone,
{
    type Event<'py> = (Bound<'py, PyString>, i64, Bound<'py, PyAny>);
    let mut given: Vec<(Event<'_>, Bound<'_, PyAny>)> = Vec::new();
    let mut tags = tags.try_iter()?;
    for event in events.try_iter()? {
        let tag = tags
            .next()
            .ok_or_else(|| PyValueError::new_err("fewer tags than events"))??;
        given.push((event?.extract()?, tag));
    }
    if tags.next().is_some() {
        return Err(PyValueError::new_err("more tags than events"));
    }
    let batch = given
        .iter()
        .map(|((key, ts, value), tag)| {
            Ok(BatchEvent {
                key: Cow::Borrowed(key.to_str()?),
                ts: *ts,
                value: EventValue::Object(value.clone()),
                tag: Tag::Object(tag.clone()),
            })
        })
        .collect::<PyResult<Vec<_>>>()?;
    let keys: Vec<Option<&Bound<'_, PyString>>> =
        given.iter().map(|((k, _, _), _)| Some(k)).collect();
    let output = if encoded {
        Output::Encoded
    } else {
        Output::Partials
    };
    apply_events_batch(py, ctx, guard, w, &batch, &keys, now_ms, output)
}

/// How `apply_events_batch` gives the effects: `(tag, key, time, partial)` tuples with the
/// Python partials, the same with their `marshal` bytes, or one `Effects` buffer of the
/// latter (the tags must be offsets).
enum Output {
    Partials,
    Encoded,
    Buffer,
}

/// `batch` applied as `KeyWindows.apply` applies a batch (see `PyKeyWindows::apply`);
/// `keys[i]`: event i's key as a Python str when there is one (else one is made per key
/// and call). None (nothing changed) when a value has no native partial or int sums might
/// leave int64.
#[allow(clippy::too_many_arguments)]
fn apply_events_batch<const N: usize, M>(
    py: Python<'_>,
    ctx: &Ctx,
    guard: &mut Guard,
    w: &mut Windows<M>,
    batch: &[BatchEvent<'_, '_>],
    key_objects: &[Option<&Bound<'_, PyString>>],
    now_ms: Option<i64>,
    output: Output,
) -> PyResult<Option<Applied>>
where
    M: crate::fiba::Monoid<P = [Val; N]> + Clone,
{
    // values without a native partial: refused by the Python lift (kept), or not native
    let mut lifts: Vec<Option<Lift<N>>> = Vec::with_capacity(batch.len());
    let mut bound = 1;
    for event in batch {
        let native = if ctx.needs_value {
            event.value.native()
        } else {
            Some(Val::None)
        };
        match native {
            Some(v @ (Val::Int(_) | Val::Float(_))) => {
                bound = bound.max(guard.value_bound(&v));
                lifts.push(None);
            }
            _ if !ctx.needs_value => lifts.push(None),
            _ => match lift_event::<N>(py, ctx, &event.value)? {
                Lift::NotNative => return Ok(None),
                lift => lifts.push(Some(lift)),
            },
        }
    }
    let keys: Vec<&str> = batch.iter().map(|e| e.key.as_ref()).collect();
    let n = batch.len() as u64;
    if !guard.fits_taken(bound, n) && !keys_fit(guard, w, &keys, bound) {
        return Ok(None);
    }
    guard.take(bound, n, true);
    let wall = w.wall(now_ms);
    let mut effects: Vec<[Val; N]> = Vec::new();
    let mut meta: Vec<(usize, Time, usize)> = Vec::new(); // (event index, window time, group) per effect
    let rejected = PyList::empty(py);
    let mut groups: Vec<(usize, Group<[Val; N]>, usize)> = Vec::new(); // (event of key, group, last event)
    let mut by_key: HashMap<&str, usize> = HashMap::new();
    for (i, (event, lift)) in batch.iter().zip(lifts).enumerate() {
        let t = w.window_time(event.ts);
        if let Err(r) = w.check(t, wall) {
            rejected.append((event.tag.object(py)?, rejected_obj(py, ctx, r)?))?;
            continue;
        }
        let lift = match lift {
            Some(lift) => lift,
            None => lift_event::<N>(py, ctx, &event.value)?,
        };
        let p = match lift {
            Lift::Native(p) => p,
            Lift::Refused(r) => {
                rejected.append((event.tag.object(py)?, r))?;
                continue;
            }
            Lift::NotNative => unreachable!("found before any change"),
        };
        w.advance(t);
        let g = *by_key.entry(keys[i]).or_insert_with(|| {
            groups.push((
                i,
                Group {
                    times: Vec::new(),
                    partials: Vec::new(),
                    slots: Vec::new(),
                },
                i,
            ));
            groups.len() - 1
        });
        let (_, group, last) = &mut groups[g];
        group.times.push(t);
        group.partials.push(p);
        group.slots.push(effects.len());
        *last = i;
        effects.push(p);
        meta.push((i, t, g));
    }
    // each key's Python str: the given one, else one per key
    let mut group_keys: Vec<Bound<'_, PyString>> = Vec::with_capacity(groups.len());
    for (first, _, _) in &groups {
        group_keys.push(match key_objects.get(*first).copied().flatten() {
            Some(key) => key.clone(),
            None => PyString::new(py, keys[*first]),
        });
    }
    let last = PyDict::new(py);
    for ((first, group, last_event), key) in groups.into_iter().zip(&group_keys) {
        w.insert_group(keys[first], group, &mut effects);
        let event = &batch[last_event];
        last.set_item(key, (event.tag.object(py)?, event.ts))?;
    }
    if let Output::Buffer = output {
        // offsets as tags (`apply_fetched`): the effects in one buffer
        let mut data = EffectsData {
            keys: group_keys.iter().map(|k| k.clone().unbind()).collect(),
            ..EffectsData::default()
        };
        for ((i, t, g), p) in meta.into_iter().zip(&effects) {
            let Tag::Offset(offset) = batch[i].tag else {
                unreachable!("a buffer of effects is made for offsets")
            };
            data.offsets.push(offset);
            data.key_of.push(g as u32);
            data.times.push(t);
            marshal_fields(&ctx.spec, p, &mut data.partials).map_err(PyOverflowError::new_err)?;
            data.ends.push(data.partials.len());
        }
        return Ok(Some((
            Py::new(py, PyEffects::new(data))?.into_any(),
            rejected.into_any().unbind(),
            last.into_any().unbind(),
        )));
    }
    let encoded = matches!(output, Output::Encoded);
    let out = PyList::empty(py);
    let mut buf: Vec<u8> = Vec::with_capacity(64);
    for ((i, t, g), p) in meta.into_iter().zip(&effects) {
        let tag = batch[i].tag.object(py)?;
        let key = &group_keys[g];
        if encoded {
            buf.clear();
            marshal_fields(&ctx.spec, p, &mut buf).map_err(PyOverflowError::new_err)?;
            out.append((tag, key, t, PyBytes::new(py, &buf)))?;
        } else {
            out.append((tag, key, t, to_py(py, ctx, p)?))?;
        }
    }
    Ok(Some((
        out.into_any().unbind(),
        rejected.into_any().unbind(),
        last.into_any().unbind(),
    )))
}

/// A parsed event's value: a number natively (an int within int64, a float), anything else
/// as the Python object `parse_many` would give.
fn event_value<'py>(py: Python<'py>, value: Value) -> PyResult<EventValue<'py>> {
    if let Value::Number(n) = &value {
        if let Some(i) = n.as_i64() {
            return Ok(EventValue::Number(Val::Int(i)));
        }
        if n.is_f64() {
            return Ok(EventValue::Number(Val::Float(
                n.as_f64().unwrap_or(f64::NAN),
            )));
        }
    }
    Ok(EventValue::Object(value_to_py(py, value)?.into_bound(py)))
}

type FetchedApplied = (PyObject, PyObject, PyObject, PyObject);

/// The events `parser` reads from the records of a fetched chunk whose bytes are `data`
/// (`parse_many`'s outcomes; the native `EventParser`, or its Python outcome for what it
/// leaves to Python), each with its record's Kafka timestamp, the offsets as tags;
/// `(offset, BadEvent)` per malformed record onto `bad`. O(records), a Python object only
/// for a value that is not a number and for a record left to Python.
fn parsed_chunk<'a, 'py>(
    py: Python<'py>,
    chunk: &'a PyFetchedRecords,
    data: &'a [u8],
    parser: &PyEventParser,
    bad: &mut Vec<(i64, PyObject)>,
) -> PyResult<Vec<(BatchEvent<'a, 'py>, i64)>> {
    let bytes = |s: Option<(usize, usize)>| s.map(|(a, b)| &data[a..b]);
    let mut events = Vec::with_capacity(chunk.records().len());
    for record in chunk.records() {
        let kafka_ts = parser.rules.kafka_time.then_some(record.timestamp);
        let tag = Tag::Offset(record.offset);
        match parser
            .rules
            .parse(bytes(record.key), bytes(record.value), kafka_ts)
        {
            Outcome::Event { key, ts, value } => events.push((
                BatchEvent {
                    key: match key {
                        Key::Kafka(s) => Cow::Borrowed(s),
                        Key::Field(s) => Cow::Owned(s),
                    },
                    ts,
                    value: event_value(py, value)?,
                    tag,
                },
                record.timestamp,
            )),
            Outcome::Bad { reason, detail } => {
                bad.push((record.offset, parser.bad_event.call1(py, (reason, detail))?))
            }
            Outcome::Python => {
                let outcome = parser
                    .python_outcome
                    .bind(py)
                    .call1((chunk.consumer_record(py, record)?,))?;
                match outcome.downcast::<PyTuple>() {
                    Ok(event) => {
                        let (key, ts, value): (String, i64, Bound<'_, PyAny>) = event.extract()?;
                        let key = Cow::Owned(key);
                        let value = EventValue::Object(value);
                        events.push((
                            BatchEvent {
                                key,
                                ts,
                                value,
                                tag,
                            },
                            record.timestamp,
                        ))
                    }
                    Err(_) => bad.push((record.offset, outcome.unbind())),
                }
            }
        }
    }
    Ok(events)
}

fn pairs_list<'py>(py: Python<'py>, pairs: Vec<(i64, PyObject)>) -> PyResult<Bound<'py, PyList>> {
    PyList::new(py, pairs)
}

/// One fetched chunk parsed and applied (see `PyKeyWindows::apply_fetched`).
fn apply_fetched_chunk<const N: usize, M>(
    py: Python<'_>,
    ctx: &Ctx,
    guard: &mut Guard,
    w: &mut Windows<M>,
    chunk: &PyFetchedRecords,
    parser: &PyEventParser,
    now_ms: Option<i64>,
) -> PyResult<Option<FetchedApplied>>
where
    M: crate::fiba::Monoid<P = [Val; N]> + Clone,
{
    let mut bad = Vec::new();
    let batch: Vec<BatchEvent<'_, '_>> =
        parsed_chunk(py, chunk, chunk.data(py).as_bytes(), parser, &mut bad)?
            .into_iter()
            .map(|(event, _)| event)
            .collect();
    let applied = apply_events_batch(py, ctx, guard, w, &batch, &[], now_ms, Output::Buffer)?;
    let Some((effects, rejected, last)) = applied else {
        return Ok(None);
    };
    let bad = pairs_list(py, bad)?.into_any().unbind();
    Ok(Some((effects, rejected, last, bad)))
}

/// `x` as an int64 when it is an exact int within int64.
fn exact_i64(x: &Bound<'_, PyAny>) -> Option<i64> {
    x.downcast_exact::<PyInt>().ok()?.extract().ok()
}

/// What one event did (`event_outcome`).
enum EventOutcome<P> {
    /// Inserted at window time `t`: the partial stored at `t` after it, the evicted times.
    Accepted(Time, P, Vec<Time>),
    /// Refused: the Python `Rejected`.
    Refused(PyObject),
    /// Nothing changed: the value has no native partial, or int sums might leave int64.
    NotNative,
}

/// One event exactly as `KeyWindows.apply_one` applies it (admit, lift, insert, evict the
/// key's expired entries), `wall` being the worker's clock plus `max_wall_clock_skew`.
#[allow(clippy::too_many_arguments)]
fn event_outcome<const N: usize, M>(
    py: Python<'_>,
    ctx: &Ctx,
    guard: &mut Guard,
    w: &mut Windows<M>,
    key: &str,
    ts: i64,
    value: &EventValue<'_>,
    wall: Option<i128>,
) -> PyResult<EventOutcome<[Val; N]>>
where
    M: crate::fiba::Monoid<P = [Val; N]> + Clone,
{
    let lift = lift_event::<N>(py, ctx, value)?;
    if matches!(lift, Lift::NotNative) {
        return Ok(EventOutcome::NotNative);
    }
    let bound = match value.native() {
        Some(v) if ctx.needs_value => guard.value_bound(&v),
        _ => 1,
    };
    if !guard.fits_taken(bound, 1) && !keys_fit(guard, w, &[key], bound) {
        return Ok(EventOutcome::NotNative);
    }
    guard.take(bound, 1, true);
    let t = w.window_time(ts);
    if let Err(r) = w.check(t, wall) {
        return Ok(EventOutcome::Refused(rejected_obj(py, ctx, r)?));
    }
    let p = match lift {
        Lift::Native(p) => p,
        Lift::Refused(r) => return Ok(EventOutcome::Refused(r)),
        Lift::NotNative => unreachable!("returned above"),
    };
    w.advance(t);
    let (stored, evicted) = w.insert_one(key, t, p);
    Ok(EventOutcome::Accepted(t, stored, evicted))
}

/// One event (see `PyKeyWindows::apply_one`).
#[allow(clippy::too_many_arguments)]
fn apply_event<const N: usize, M>(
    py: Python<'_>,
    ctx: &Ctx,
    guard: &mut Guard,
    w: &mut Windows<M>,
    key: &str,
    ts: i64,
    value: &Bound<'_, PyAny>,
    now_ms: Option<i64>,
) -> PyResult<Option<(Time, PyObject, PyObject)>>
where
    M: crate::fiba::Monoid<P = [Val; N]> + Clone,
{
    let wall = w.wall(now_ms);
    let value = EventValue::Object(value.clone());
    match event_outcome(py, ctx, guard, w, key, ts, &value, wall)? {
        EventOutcome::Accepted(t, stored, evicted) => Ok(Some((
            t,
            to_py(py, ctx, &stored)?,
            times_tuple(py, evicted)?,
        ))),
        EventOutcome::Refused(r) => Err(PyErr::from_value(r.into_bound(py))),
        EventOutcome::NotNative => Ok(None),
    }
}

/// How accepted events' aggregate records are written (`apply_events`,
/// `apply_fetched_events`): from the native partials (`event_records`) where the native
/// `AggregateEncoder` and the part names allow it, else by the Python `lower` and the
/// encoder (the native one called in Rust, or any object's `encode`).
struct RecordWriter<'a, 'py> {
    encoder: &'a Bound<'py, PyAny>,
    native: Option<&'a Bound<'py, PyAggregateEncoder>>,
    partition: &'a Bound<'py, PyAny>,
    layout: Option<Layout>,
    out: Vec<u8>,
}

impl<'a, 'py> RecordWriter<'a, 'py> {
    fn new(
        py: Python<'py>,
        ctx: &Ctx,
        encoder: &'a Bound<'py, PyAny>,
        partition: &'a Bound<'py, PyAny>,
    ) -> Self {
        let native = encoder.downcast::<PyAggregateEncoder>().ok();
        RecordWriter {
            encoder,
            native,
            partition,
            layout: native.and_then(|native| record_layout(ctx, py, native.get(), partition)),
            out: Vec::with_capacity(256),
        }
    }

    /// `key`'s record after its accepted event at `ts_ms` (`Written`), answering the input
    /// record at `at` when the event time and the offset are exact ints (only then written
    /// natively); `objects` gives the key, event time and offset as the encoder's Python
    /// arguments. O(windows) plus, on the Python path, one `lower` per window.
    #[allow(clippy::too_many_arguments)]
    fn write<const N: usize, M>(
        &mut self,
        py: Python<'py>,
        ctx: &Ctx,
        w: &Windows<M>,
        identity: &[Val; N],
        key: &str,
        ts_ms: i64,
        at: Option<i64>,
        objects: impl FnOnce() -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyAny>, Bound<'py, PyAny>)>,
    ) -> PyResult<Written>
    where
        M: crate::fiba::Monoid<P = [Val; N]> + Clone,
    {
        let windows = if w.cfg.event_time_end {
            w.windows_ending(key, w.window_time(ts_ms))
        } else {
            w.windows_of(key)
        };
        let stream_time = w.stream_time.expect("set by the accepted event");
        let out = &mut self.out;
        let written = match (&self.layout, at) {
            (Some(layout), Some(at)) => layout.write(
                out,
                &ctx.spec,
                key,
                ts_ms,
                stream_time,
                &windows,
                identity,
                at,
            ),
            _ => false,
        };
        if written {
            return Ok(Written::Native);
        }
        let (key, ts, offset) = objects()?;
        let item = (
            key,
            ts,
            stream_time.into_pyobject(py)?.into_any(),
            lowered_list(py, ctx, windows)?.into_bound(py),
            self.partition.clone(),
            offset,
        );
        Ok(Written::Object(match self.native {
            Some(native) => native.get().encode_item(py, out, item)?,
            None => self
                .encoder
                .call_method1(intern!(py, "encode"), item)?
                .unbind(),
        }))
    }

    /// A record `write` wrote as a Python object.
    fn object(&self, py: Python<'_>, written: Written) -> PyObject {
        match written {
            Written::Native => PyBytes::new(py, &self.out).into_any().unbind(),
            Written::Object(data) => data,
        }
    }
}

/// A record `RecordWriter::write` wrote: natively into its buffer, or a Python object (the
/// encoder's bytes).
enum Written {
    Native,
    Object(PyObject),
}

/// `(effects, keys, event_ts, records, rejected, done)` of `PyKeyWindows::apply_events`.
type AppliedEvents = (PyObject, PyObject, PyObject, PyObject, PyObject, usize);

/// A slice of events applied one by one (see `PyKeyWindows::apply_events`).
#[allow(clippy::too_many_arguments)]
fn apply_events_one_by_one<const N: usize, M>(
    py: Python<'_>,
    ctx: &Ctx,
    guard: &mut Guard,
    w: &mut Windows<M>,
    events: &Bound<'_, PyAny>,
    offsets: &Bound<'_, PyAny>,
    partition: &Bound<'_, PyAny>,
    encoder: &Bound<'_, PyAny>,
    now_ms: Option<i64>,
) -> PyResult<AppliedEvents>
where
    M: crate::fiba::Monoid<P = [Val; N]> + Clone,
{
    let (effects, keys, stamps, records, rejected) = (
        PyList::empty(py),
        PyList::empty(py),
        PyList::empty(py),
        PyList::empty(py),
        PyList::empty(py),
    );
    let wall = w.wall(now_ms);
    let mut writer = RecordWriter::new(py, ctx, encoder, partition);
    let identity = w.monoid().identity();
    let mut offsets = offsets.try_iter()?;
    let mut done = 0;
    for event in events.try_iter()? {
        let offset = offsets
            .next()
            .ok_or_else(|| PyValueError::new_err("fewer offsets than events"))??;
        let (key, ts, value): (Bound<'_, PyString>, Bound<'_, PyAny>, Bound<'_, PyAny>) =
            event?.extract()?;
        let (key_str, ts_ms) = (key.to_str()?, ts.extract::<i64>()?);
        let value = EventValue::Object(value);
        match event_outcome(py, ctx, guard, w, key_str, ts_ms, &value, wall)? {
            EventOutcome::NotNative => {
                return Ok(applied(effects, keys, stamps, records, rejected, done))
            }
            EventOutcome::Refused(r) => rejected.append((&offset, r))?,
            EventOutcome::Accepted(t, stored, evicted) => {
                let at = exact_i64(&ts).and(exact_i64(&offset));
                let objects = || Ok((key.clone().into_any(), ts.clone(), offset.clone()));
                let written = writer.write(py, ctx, w, &identity, key_str, ts_ms, at, objects)?;
                let data = writer.object(py, written);
                let partial = to_py(py, ctx, &stored)?;
                effects.append((&offset, &key, t, partial, times_tuple(py, evicted)?))?;
                keys.append(PyBytes::new(py, key_str.as_bytes()))?;
                stamps.append(ts)?;
                records.append(data)?;
            }
        }
        done += 1;
    }
    if offsets.next().is_some() {
        return Err(PyValueError::new_err("more offsets than events"));
    }
    Ok(applied(effects, keys, stamps, records, rejected, done))
}

fn applied(
    effects: Bound<'_, PyList>,
    keys: Bound<'_, PyList>,
    stamps: Bound<'_, PyList>,
    records: Bound<'_, PyList>,
    rejected: Bound<'_, PyList>,
    done: usize,
) -> AppliedEvents {
    (
        effects.into_any().unbind(),
        keys.into_any().unbind(),
        stamps.into_any().unbind(),
        records.into_any().unbind(),
        rejected.into_any().unbind(),
        done,
    )
}

/// `(effects, records, input_ts, rejected, bad, rest)` of `PyKeyWindows::apply_fetched_events`.
type FetchedEvents = (
    PyObject,
    PyKeyedRecords,
    PyObject,
    PyObject,
    PyObject,
    Option<i64>,
);

/// One fetched chunk parsed and its events applied one by one (see
/// `PyKeyWindows::apply_fetched_events`).
#[allow(clippy::too_many_arguments)]
fn apply_fetched_events_chunk<const N: usize, M>(
    py: Python<'_>,
    ctx: &Ctx,
    guard: &mut Guard,
    w: &mut Windows<M>,
    chunk: &PyFetchedRecords,
    parser: &PyEventParser,
    partition: &Bound<'_, PyAny>,
    encoder: &Bound<'_, PyAny>,
    now_ms: Option<i64>,
) -> PyResult<FetchedEvents>
where
    M: crate::fiba::Monoid<P = [Val; N]> + Clone,
{
    let mut bad = Vec::new();
    let events = parsed_chunk(py, chunk, chunk.data(py).as_bytes(), parser, &mut bad)?;
    let (input_ts, rejected) = (PyList::empty(py), PyList::empty(py));
    let mut records = PyKeyedRecords::default();
    let mut data = EffectsData::default();
    // per key: its index in `data.keys` (one Python str per key and call)
    let mut key_index: HashMap<&str, u32> = HashMap::new();
    let wall = w.wall(now_ms);
    let mut writer = RecordWriter::new(py, ctx, encoder, partition);
    let identity = w.monoid().identity();
    let mut rest = None;
    for (event, kafka_ts) in &events {
        let Tag::Offset(offset) = event.tag else {
            unreachable!("a fetched event's tag is its offset")
        };
        let key = event.key.as_ref();
        match event_outcome(py, ctx, guard, w, key, event.ts, &event.value, wall)? {
            EventOutcome::NotNative => {
                rest = Some(offset);
                break;
            }
            EventOutcome::Refused(r) => rejected.append((offset, r))?,
            EventOutcome::Accepted(t, stored, evicted) => {
                let objects = || {
                    Ok((
                        PyString::new(py, key).into_any(),
                        event.ts.into_pyobject(py)?.into_any(),
                        offset.into_pyobject(py)?.into_any(),
                    ))
                };
                match writer.write(py, ctx, w, &identity, key, event.ts, Some(offset), objects)? {
                    Written::Native => records.push(key.as_bytes(), &writer.out, event.ts),
                    Written::Object(record) => {
                        let record = record.bind(py).downcast::<PyBytes>()?.as_bytes();
                        records.push(key.as_bytes(), record, event.ts)
                    }
                }
                let index = *key_index.entry(key).or_insert_with(|| {
                    data.keys.push(PyString::new(py, key).unbind());
                    (data.keys.len() - 1) as u32
                });
                data.offsets.push(offset);
                data.key_of.push(index);
                data.times.push(t);
                marshal_fields(&ctx.spec, &stored, &mut data.partials)
                    .map_err(PyOverflowError::new_err)?;
                data.ends.push(data.partials.len());
                data.evicted.extend_from_slice(&evicted);
                data.evicted_ends.push(data.evicted.len());
                input_ts.append(*kafka_ts)?;
            }
        }
    }
    if let Some(stop) = rest {
        // the records from `stop` on are the caller's: their bad ones too
        bad.retain(|(offset, _)| *offset < stop);
    }
    Ok((
        Py::new(py, PyEffects::new(data))?.into_any(),
        records,
        input_ts.into_any().unbind(),
        rejected.into_any().unbind(),
        pairs_list(py, bad)?.into_any().unbind(),
        rest,
    ))
}

fn load_pairs<const N: usize, M>(
    ctx: &Ctx,
    guard: &mut Guard,
    w: &mut Windows<M>,
    key: &str,
    pairs: &Bound<'_, PyAny>,
) -> PyResult<()>
where
    M: crate::fiba::Monoid<P = [Val; N]> + Clone,
{
    let mut out: Vec<(Time, [Val; N])> = Vec::new();
    for pair in pairs.try_iter()? {
        let (t, partial): (Time, Bound<'_, PyAny>) = pair?.extract()?;
        if out.last().is_some_and(|&(last, _)| t < last) {
            return Err(PyValueError::new_err(format!(
                "load: time {t} after {} is out of order",
                out.last().expect("checked").0
            )));
        }
        out.push((t, partial_from_py(&ctx.spec, &partial)?));
    }
    let bound = out
        .iter()
        .fold(1, |b, (_, p)| b.max(guard.partial_bound(p)));
    if !fits(guard.bound().max(bound), out.len() as u64) {
        return Err(PyOverflowError::new_err(format!(
            "load: the int sums of {key:?}'s partials might leave int64 (the Python path is unbounded)"
        )));
    }
    let counted = out.iter().all(|(_, p)| guard.counts_one(p));
    guard.take(bound, out.len() as u64, counted);
    w.load(key, out);
    Ok(())
}

/// The per-key windows of one partition (`stores.native_windows.NativeKeyWindows` is its
/// front): `KeyWindows(kinds, names, sizes, retention, max_future_skew,
/// max_wall_clock_skew, resolution, event_time_end, lower, lift, rejected, empty,
/// min_arity=4, parts=None)`; `parts`: the compose's part names, for records written from
/// the native partials.
#[pyclass(module = "stores._native", name = "KeyWindows")]
pub struct PyKeyWindows {
    core: Core,
    ctx: Ctx,
    guard: Guard,
}

#[pymethods]
impl PyKeyWindows {
    #[new]
    #[pyo3(signature = (kinds, names, sizes, retention, max_future_skew, max_wall_clock_skew,
        resolution, event_time_end, lower, lift, rejected, empty, min_arity=4, parts=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        kinds: Vec<String>,
        names: Vec<PyObject>,
        sizes: Vec<i64>,
        retention: i64,
        max_future_skew: Option<i64>,
        max_wall_clock_skew: Option<i64>,
        resolution: Option<i64>,
        event_time_end: bool,
        lower: PyObject,
        lift: PyObject,
        rejected: PyObject,
        empty: PyObject,
        min_arity: usize,
        parts: Option<Vec<String>>,
    ) -> PyResult<Self> {
        if min_arity < 2 {
            return Err(PyValueError::new_err("min_arity must be at least 2"));
        }
        if names.len() != sizes.len() {
            return Err(PyValueError::new_err("one name per window size"));
        }
        if resolution.is_some_and(|r| r <= 0) {
            return Err(PyValueError::new_err("resolution must be positive"));
        }
        let kinds = kinds
            .iter()
            .map(|name| {
                Kind::from_name(name)
                    .ok_or_else(|| PyValueError::new_err(format!("no native monoid {name:?}")))
            })
            .collect::<PyResult<Vec<Kind>>>()?;
        let needs_value = kinds.iter().any(|&k| k != Kind::Count);
        let spec = Arc::new(Spec::new(&kinds));
        let cfg = Settings {
            sizes,
            retention,
            max_future_skew,
            max_wall_clock_skew,
            resolution,
            event_time_end,
        };
        let core = Core::new(&kinds, &spec, cfg, min_arity)?;
        Ok(PyKeyWindows {
            core,
            guard: Guard::new(&spec),
            ctx: Ctx {
                spec,
                needs_value,
                lift,
                lower,
                empty,
                rejected,
                names,
                parts,
            },
        })
    }

    /// The stream time (None before any event).
    #[getter]
    fn get_stream_time(&self) -> Option<i64> {
        with_core!(&self.core, w => w.stream_time)
    }

    #[setter]
    fn set_stream_time(&mut self, s: Option<i64>) {
        with_core!(&mut self.core, w => w.stream_time = s)
    }

    /// `P`: the window time of the previous checked event (None: the stream time's place).
    #[getter]
    fn previous(&self) -> Option<i64> {
        with_core!(&self.core, w => w.previous)
    }

    /// Apply `(key, ts, value)` events with their tags (`KeyWindows.apply`), the worker's
    /// clock `now_ms` read once: `(effects, rejected, last)`, or None (nothing changed)
    /// when a value that the Python lift takes has no native partial. `encoded`: each
    /// effect's partial is its `marshal` bytes as the window store writes them
    /// (`store_writes::marshal_fields`), with no Python partial made.
    #[pyo3(signature = (events, tags, now_ms=None, encoded=false))]
    fn apply(
        &mut self,
        py: Python<'_>,
        events: &Bound<'_, PyAny>,
        tags: &Bound<'_, PyAny>,
        now_ms: Option<i64>,
        encoded: bool,
    ) -> PyResult<Option<Applied>> {
        let (ctx, guard) = (&self.ctx, &mut self.guard);
        with_core!(&mut self.core, w => apply_batch(py, ctx, guard, w, events, tags, now_ms, encoded))
    }

    /// Parse the records of a fetched chunk (`FetchedRecords`) with `parser` (the native
    /// `EventParser`: `parse_many`'s outcomes, read from the chunk's bytes) and apply the
    /// events among them as `apply(events, offsets, now_ms, encoded=True)` does, with no
    /// Python object per event: `(effects, rejected, last, bad)`, the effects in one
    /// `Effects` buffer (`store_writes`: what `write_effects` reads), `bad` holding
    /// `(offset, BadEvent)` per malformed record; None (nothing changed) where `apply`
    /// answers None. O(records) plus one Python str per key.
    #[pyo3(signature = (chunk, parser, now_ms=None))]
    fn apply_fetched(
        &mut self,
        py: Python<'_>,
        chunk: PyRef<'_, PyFetchedRecords>,
        parser: PyRef<'_, PyEventParser>,
        now_ms: Option<i64>,
    ) -> PyResult<Option<FetchedApplied>> {
        let (ctx, guard) = (&self.ctx, &mut self.guard);
        with_core!(&mut self.core, w => apply_fetched_chunk(py, ctx, guard, w, &chunk, &parser, now_ms))
    }

    /// Apply one event (`KeyWindows.apply_one`): `(time, partial, evicted)`, the Python
    /// `Rejected` raised, or None (nothing changed) when the value has no native partial.
    #[pyo3(signature = (key, ts, value, now_ms=None))]
    fn apply_one(
        &mut self,
        py: Python<'_>,
        key: &str,
        ts: i64,
        value: &Bound<'_, PyAny>,
        now_ms: Option<i64>,
    ) -> PyResult<Option<(Time, PyObject, PyObject)>> {
        let (ctx, guard) = (&self.ctx, &mut self.guard);
        with_core!(&mut self.core, w => apply_event(py, ctx, guard, w, key, ts, value, now_ms))
    }

    /// Apply a slice of parsed `(key, ts, value)` events with their input `offsets` one by
    /// one, each exactly as `apply_one` does (the clock `now_ms` read once for the slice),
    /// and encode each accepted event's aggregate record with `encoder` (the native
    /// `AggregateEncoder`, called in Rust, or any object with the Python encoder's `encode`)
    /// answering input `partition` at its offset: `(effects, keys, event_ts, records,
    /// rejected, done)`, per accepted event in order `(offset, key, time, partial, evicted)`,
    /// its key's UTF-8 bytes, its event time and its record's bytes, `(offset, Rejected)`
    /// per refused one, and how many events were applied: fewer than given when the next
    /// one's value has no native partial (that event changed nothing). With the native
    /// encoder and the part names given, each record is written from the native partials
    /// (`event_records`), else where a value could differ from the Python `lower`'s, by
    /// `lower` and the encoder. O(1) Python objects per event.
    #[pyo3(signature = (events, offsets, partition, encoder, now_ms=None))]
    #[allow(clippy::too_many_arguments)]
    fn apply_events(
        &mut self,
        py: Python<'_>,
        events: &Bound<'_, PyAny>,
        offsets: &Bound<'_, PyAny>,
        partition: &Bound<'_, PyAny>,
        encoder: &Bound<'_, PyAny>,
        now_ms: Option<i64>,
    ) -> PyResult<AppliedEvents> {
        let (ctx, guard) = (&self.ctx, &mut self.guard);
        with_core!(&mut self.core, w => apply_events_one_by_one(
            py, ctx, guard, w, events, offsets, partition, encoder, now_ms
        ))
    }

    /// Parse the records of a fetched chunk (`FetchedRecords`) with `parser` (the native
    /// `EventParser`, as `apply_fetched` does) and apply their events one by one as
    /// `apply_events(events, offsets, partition, encoder, now_ms)` does, with no Python
    /// object per event but its input timestamp: `(effects, records, input_ts, rejected,
    /// bad, rest)`, the effects one `Effects` buffer of `(offset, key, time, partial bytes,
    /// evicted times)` (the store codec's `marshal` bytes), the aggregate records one
    /// `KeyedRecords` buffer of `(key bytes, record bytes, event time)` per accepted event
    /// (what `OutputQueue.add_records` queues), its input record's Kafka timestamp, `(offset,
    /// Rejected)` per refused event, `(offset, BadEvent)` per malformed record, and `rest`:
    /// None, or the offset of the first record not applied (its value has no native partial,
    /// or int sums might leave int64: nothing changed from it on; the caller's path takes the
    /// records from there). O(records) plus O(windows) per accepted event.
    #[pyo3(signature = (chunk, parser, partition, encoder, now_ms=None))]
    #[allow(clippy::too_many_arguments)]
    fn apply_fetched_events(
        &mut self,
        py: Python<'_>,
        chunk: PyRef<'_, PyFetchedRecords>,
        parser: PyRef<'_, PyEventParser>,
        partition: &Bound<'_, PyAny>,
        encoder: &Bound<'_, PyAny>,
        now_ms: Option<i64>,
    ) -> PyResult<FetchedEvents> {
        let (ctx, guard) = (&self.ctx, &mut self.guard);
        with_core!(&mut self.core, w => apply_fetched_events_chunk(
            py, ctx, guard, w, &chunk, &parser, partition, encoder, now_ms
        ))
    }

    /// Evict `key`'s expired entries; their times.
    fn evict_expired(&mut self, py: Python<'_>, key: &str) -> PyResult<PyObject> {
        times_tuple(py, with_core!(&mut self.core, w => w.evict_expired(key)))
    }

    /// `[(key, evicted times)]` per cleaned key (`KeyWindows.sweep`).
    fn sweep(&mut self, py: Python<'_>) -> PyResult<PyObject> {
        let list = PyList::empty(py);
        for (key, times) in with_core!(&mut self.core, w => w.sweep()) {
            list.append((key, times_tuple(py, times)?))?;
        }
        Ok(list.into_any().unbind())
    }

    /// The windows a record of `key` reports after an event at `event_ts`
    /// (`KeyWindows.lowered_windows`).
    fn lowered_windows(&self, py: Python<'_>, key: &str, event_ts: i64) -> PyResult<PyObject> {
        let ctx = &self.ctx;
        with_core!(&self.core, w => {
            let windows = if w.cfg.event_time_end {
                w.windows_ending(key, w.window_time(event_ts))
            } else {
                w.windows_of(key)
            };
            lowered_list(py, ctx, windows)
        })
    }

    /// Every window of `key` at the stream time.
    fn lowered_of(&self, py: Python<'_>, key: &str) -> PyResult<PyObject> {
        let ctx = &self.ctx;
        with_core!(&self.core, w => lowered_list(py, ctx, w.windows_of(key)))
    }

    /// Every window of `key` ending at window time `end`.
    fn lowered_ending(&self, py: Python<'_>, key: &str, end: i64) -> PyResult<PyObject> {
        let ctx = &self.ctx;
        with_core!(&self.core, w => lowered_list(py, ctx, w.windows_ending(key, end)))
    }

    /// The lowered aggregate of `key`'s retained entries with `t_from <= t <= t_to`.
    fn query_range(&self, py: Python<'_>, key: &str, t_from: i64, t_to: i64) -> PyResult<PyObject> {
        let ctx = &self.ctx;
        with_core!(&self.core, w => lowered(py, ctx, &w.query_range(key, t_from, t_to)))
    }

    /// Set `key`'s entries from sorted `(t, partial)` pairs.
    fn load(&mut self, key: &str, pairs: &Bound<'_, PyAny>) -> PyResult<()> {
        let (ctx, guard) = (&self.ctx, &mut self.guard);
        with_core!(&mut self.core, w => load_pairs(ctx, guard, w, key, pairs))
    }

    fn clear(&mut self) {
        self.guard.reset();
        with_core!(&mut self.core, w => w.clear())
    }

    /// Drop `key` (KeyError if absent).
    fn forget(&mut self, key: &str) -> PyResult<()> {
        if with_core!(&mut self.core, w => w.forget(key)) {
            Ok(())
        } else {
            Err(PyKeyError::new_err(key.to_owned()))
        }
    }

    /// `key`'s `(t, partial)` entries in time order.
    fn entries(&self, py: Python<'_>, key: &str) -> PyResult<PyObject> {
        let ctx = &self.ctx;
        let list = PyList::empty(py);
        with_core!(&self.core, w => {
            for (t, p) in w.entries(key) {
                list.append((t, to_py(py, ctx, &p)?))?;
            }
        });
        Ok(list.into_any().unbind())
    }

    fn entry_count(&self) -> usize {
        with_core!(&self.core, w => w.entry_count())
    }

    /// The keys, in the order they were created.
    fn keys(&self) -> Vec<String> {
        with_core!(&self.core, w => w.keys().into_iter().map(str::to_owned).collect())
    }

    /// `key`'s time in the sweep index (None if absent).
    fn indexed(&self, key: &str) -> Option<i128> {
        with_core!(&self.core, w => w.indexed(key))
    }

    /// The fields of each partial the trees store and every walk copies (`Core::new`).
    #[getter]
    fn partial_width(&self) -> usize {
        self.core.partial_width()
    }

    /// Combines of the present keys' trees since their creation or `reset_combines()`.
    #[getter]
    fn combines(&self) -> u64 {
        with_core!(&self.core, w => w.combines())
    }

    fn reset_combines(&self) {
        with_core!(&self.core, w => w.reset_combines())
    }

    fn __len__(&self) -> usize {
        with_core!(&self.core, w => w.len())
    }

    fn __contains__(&self, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        match key.downcast::<PyString>() {
            Ok(key) => Ok(with_core!(&self.core, w => w.contains(key.to_str()?))),
            Err(_) => Ok(false),
        }
    }

    fn __repr__(&self) -> String {
        format!("<native KeyWindows keys={}>", self.__len__())
    }
}
