//! The worker's record I/O in one call per fetched chunk: `EventParser.parse_many` (input
//! records -> `(key, ts, value)` tuples or `BadEvent`s, `events.rs`) and
//! `AggregateEncoder.encode` / `encode_many` (a key's lowered windows -> the aggregate
//! record's bytes, exactly as orjson writes them in `agents.records`). Whatever the native
//! code cannot decide as the Python code does goes, for that record only, to the Python
//! function given at construction, so the outcome is always the Python one.

use crate::events::{Key, Outcome, Rules};
use crate::fetched_records::python::PyFetchedRecords;
use crate::json_text::{push_orjson_float, push_str};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use serde_json::Value;

pub(crate) fn value_to_py(py: Python<'_>, value: Value) -> PyResult<PyObject> {
    Ok(match value {
        Value::Null => py.None(),
        Value::Bool(b) => PyBool::new(py, b).to_owned().into_any().unbind(),
        Value::Number(n) => match n.as_i64() {
            Some(i) => i.into_pyobject(py)?.into_any().unbind(),
            None => match n.as_u64() {
                Some(u) => u.into_pyobject(py)?.into_any().unbind(),
                None => PyFloat::new(py, n.as_f64().unwrap_or(f64::NAN))
                    .into_any()
                    .unbind(),
            },
        },
        Value::String(s) => PyString::new(py, &s).into_any().unbind(),
        Value::Array(items) => {
            let list = PyList::empty(py);
            for item in items {
                list.append(value_to_py(py, item)?)?;
            }
            list.into_any().unbind()
        }
        Value::Object(map) => {
            let dict = PyDict::new(py);
            for (k, v) in map {
                dict.set_item(k, value_to_py(py, v)?)?;
            }
            dict.into_any().unbind()
        }
    })
}

/// `agents.events.EventParser.parse_many` for one `WorkerSettings`; build it with
/// `agents.events.EventParser` (which passes the rules, the `BadEvent` class and the Python
/// parser's one-record outcome function, `python_outcome(record)`).
#[pyclass(module = "stores._native", name = "EventParser", frozen)]
pub struct PyEventParser {
    pub(crate) rules: Rules,
    pub(crate) bad_event: PyObject,
    pub(crate) python_outcome: PyObject,
}

#[pymethods]
impl PyEventParser {
    #[new]
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (key_field, ts_field, value_field, kafka_time, max_key, max_value,
                        min_time, max_time, field_details, bad_event, python_outcome))]
    fn new(
        key_field: Option<String>,
        ts_field: String,
        value_field: String,
        kafka_time: bool,
        max_key: usize,
        max_value: usize,
        min_time: i64,
        max_time: i64,
        field_details: (String, String, String, String),
        bad_event: PyObject,
        python_outcome: PyObject,
    ) -> Self {
        let (no_key_field, no_ts_field, no_value_field, empty_key_field) = field_details;
        PyEventParser {
            rules: Rules {
                key_field,
                ts_field,
                value_field,
                kafka_time,
                max_key,
                max_value,
                min_time,
                max_time,
                no_key_field,
                no_ts_field,
                no_value_field,
                empty_key_field,
            },
            bad_event,
            python_outcome,
        }
    }

    /// Per record (objects with `.key`, `.value`, `.timestamp`, or a `FetchedRecords`, read
    /// from its bytes), in order, `(key, ts, value)` or a `BadEvent`: `EventParser.parse_many`'s
    /// outcome. O(total size).
    fn parse_many<'py>(
        &self,
        py: Python<'py>,
        records: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyList>> {
        let out = PyList::empty(py);
        if let Ok(fetched) = records.downcast::<PyFetchedRecords>() {
            let fetched = fetched.get();
            let data = fetched.data(py).as_bytes();
            let bytes = |s: Option<(usize, usize)>| s.map(|(a, b)| &data[a..b]);
            for record in fetched.records() {
                let kafka_ts = self.rules.kafka_time.then_some(record.timestamp);
                let outcome = self
                    .rules
                    .parse(bytes(record.key), bytes(record.value), kafka_ts);
                out.append(match outcome {
                    Outcome::Python => self
                        .python_outcome
                        .call1(py, (fetched.consumer_record(py, record)?,))?,
                    outcome => self.outcome_object(py, outcome)?,
                })?;
            }
            return Ok(out);
        }
        for record in records.try_iter()? {
            let record = record?;
            out.append(self.parse_record(py, &record)?)?;
        }
        Ok(out)
    }
}

/// `Some(None)` for None, `Some(Some(bytes))` for exact bytes, `None` for anything else.
fn optional_bytes<'a>(x: &'a Bound<'_, PyAny>) -> Option<Option<&'a [u8]>> {
    if x.is_none() {
        Some(None)
    } else {
        x.downcast_exact::<PyBytes>()
            .ok()
            .map(|b| Some(b.as_bytes()))
    }
}

impl PyEventParser {
    fn parse_record(&self, py: Python<'_>, record: &Bound<'_, PyAny>) -> PyResult<PyObject> {
        let key_obj = record.getattr(intern!(py, "key"))?;
        let value_obj = record.getattr(intern!(py, "value"))?;
        let kafka_ts = if self.rules.kafka_time {
            let ts = record.getattr(intern!(py, "timestamp"))?;
            if ts.is_none() {
                Some(None)
            } else {
                ts.downcast_exact::<PyInt>()
                    .ok()
                    .and_then(|i| i.extract::<i64>().ok())
                    .map(Some)
            }
        } else {
            Some(None)
        };
        let (Some(key), Some(value), Some(kafka_ts)) = (
            optional_bytes(&key_obj),
            optional_bytes(&value_obj),
            kafka_ts,
        ) else {
            return self.python_outcome.call1(py, (record,));
        };
        match self.rules.parse(key, value, kafka_ts) {
            Outcome::Python => self.python_outcome.call1(py, (record,)),
            outcome => self.outcome_object(py, outcome),
        }
    }

    /// The Python object of a decided outcome: `(key, ts, value)` or a `BadEvent`.
    fn outcome_object(&self, py: Python<'_>, outcome: Outcome<'_>) -> PyResult<PyObject> {
        match outcome {
            Outcome::Event { key, ts, value } => {
                let key = match &key {
                    Key::Kafka(s) => PyString::new(py, s),
                    Key::Field(s) => PyString::new(py, s),
                };
                let parts: [PyObject; 3] = [
                    key.into_any().unbind(),
                    ts.into_pyobject(py)?.into_any().unbind(),
                    value_to_py(py, value)?,
                ];
                Ok(PyTuple::new(py, parts)?.into_any().unbind())
            }
            Outcome::Bad { reason, detail } => self.bad_event.call1(py, (reason, detail)),
            Outcome::Python => unreachable!("decided by the caller"),
        }
    }
}

/// Marks a value the native encoder does not write as orjson would (the Python encoder then
/// writes the whole record).
struct Unsure;

const MAX_DEPTH: usize = 200;

/// `x` as orjson writes it (`OPT_PASSTHROUGH_DATACLASS`, no `default` needed): None, bool,
/// int within 64 bits, float (non-finite as `null`), str without surrogates, list, tuple,
/// dict with str keys, all of the exact types; `Unsure` for anything else.
fn push_value(out: &mut Vec<u8>, x: &Bound<'_, PyAny>, depth: usize) -> Result<(), Unsure> {
    if depth > MAX_DEPTH {
        return Err(Unsure);
    }
    if x.is_none() {
        out.extend_from_slice(b"null");
    } else if let Ok(f) = x.downcast_exact::<PyFloat>() {
        let f = f.value();
        if f.is_finite() {
            push_orjson_float(out, f);
        } else {
            out.extend_from_slice(b"null");
        }
    } else if let Ok(s) = x.downcast_exact::<PyString>() {
        push_str(out, s.to_str().map_err(|_| Unsure)?);
    } else if let Ok(b) = x.downcast_exact::<PyBool>() {
        out.extend_from_slice(if b.is_true() { b"true" } else { b"false" });
    } else if let Ok(i) = x.downcast_exact::<PyInt>() {
        if let Ok(v) = i.extract::<i64>() {
            out.extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
        } else {
            let v = i.extract::<u64>().map_err(|_| Unsure)?;
            out.extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
        }
    } else if let Ok(d) = x.downcast_exact::<PyDict>() {
        out.push(b'{');
        for (i, (k, v)) in d.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            let k = k.downcast_exact::<PyString>().map_err(|_| Unsure)?;
            push_str(out, k.to_str().map_err(|_| Unsure)?);
            out.push(b':');
            push_value(out, &v, depth + 1)?;
        }
        out.push(b'}');
    } else if let Ok(t) = x.downcast_exact::<PyTuple>() {
        push_items(out, t.iter(), depth)?;
    } else if let Ok(l) = x.downcast_exact::<PyList>() {
        push_items(out, l.iter(), depth)?;
    } else {
        return Err(Unsure);
    }
    Ok(())
}

fn push_items<'py>(
    out: &mut Vec<u8>,
    items: impl Iterator<Item = Bound<'py, PyAny>>,
    depth: usize,
) -> Result<(), Unsure> {
    out.push(b'[');
    for (i, item) in items.enumerate() {
        if i > 0 {
            out.push(b',');
        }
        push_value(out, &item, depth + 1)?;
    }
    out.push(b']');
    Ok(())
}

/// `agents.records.AggregateEncoder` in Rust: the aggregates topic's bytes of a key's
/// lowered windows, byte for byte the Python encoder's (which it is given, `python`, and
/// which writes any record holding a value of another type than orjson's native ones, an
/// int beyond 64 bits or a str with surrogates). O(size of the record).
#[pyclass(module = "stores._native", name = "AggregateEncoder", frozen)]
pub struct PyAggregateEncoder {
    aggregations: Vec<Py<PyString>>,
    whole: bool,
    python: PyObject,
}

pub(crate) type Item<'py> = (
    Bound<'py, PyAny>,
    Bound<'py, PyAny>,
    Bound<'py, PyAny>,
    Bound<'py, PyAny>,
    Bound<'py, PyAny>,
    Bound<'py, PyAny>,
);

/// The text of each of `objects`; None unless every one is an exact `str` (no subclass).
pub(crate) fn plain_strs<'a, T>(py: Python<'a>, objects: &'a [Py<T>]) -> Option<Vec<&'a str>> {
    objects
        .iter()
        .map(|o| {
            o.bind(py)
                .as_any()
                .downcast_exact::<PyString>()
                .ok()?
                .to_str()
                .ok()
        })
        .collect()
}

#[pymethods]
impl PyAggregateEncoder {
    #[new]
    fn new(aggregations: Vec<Py<PyString>>, whole: bool, python: PyObject) -> Self {
        PyAggregateEncoder {
            aggregations,
            whole,
            python,
        }
    }

    /// `AggregateEncoder.encode(key, event_ts, stream_time, windows, input_partition,
    /// input_offset)`.
    #[allow(clippy::too_many_arguments)]
    fn encode<'py>(
        &self,
        py: Python<'py>,
        key: Bound<'py, PyAny>,
        event_ts: Bound<'py, PyAny>,
        stream_time: Bound<'py, PyAny>,
        windows: Bound<'py, PyAny>,
        input_partition: Bound<'py, PyAny>,
        input_offset: Bound<'py, PyAny>,
    ) -> PyResult<PyObject> {
        let item = (
            key,
            event_ts,
            stream_time,
            windows,
            input_partition,
            input_offset,
        );
        let mut out = Vec::with_capacity(256);
        self.encode_item(py, &mut out, item)
    }

    /// `[encode(*item) for item in items]` in one call.
    fn encode_many<'py>(
        &self,
        py: Python<'py>,
        items: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyList>> {
        let result = PyList::empty(py);
        let mut out = Vec::with_capacity(256);
        for item in items.try_iter()? {
            let item: Item<'py> = item?.extract()?;
            result.append(self.encode_item(py, &mut out, item)?)?;
        }
        Ok(result)
    }
}

/// The JSON text orjson writes for `x`, if the native encoder writes it (`push_value`).
pub(crate) fn json_text_of(x: &Bound<'_, PyAny>) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    push_value(&mut out, x, 0).ok()?;
    Some(out)
}

impl PyAggregateEncoder {
    /// The aggregations' names and whether a record's aggregates are the whole lowered
    /// dict, for records written from native partials (`event_records::Layout`); None when
    /// a name is not a plain str.
    pub(crate) fn layout<'a>(&'a self, py: Python<'a>) -> Option<(Vec<&'a str>, bool)> {
        Some((plain_strs(py, &self.aggregations)?, self.whole))
    }

    pub(crate) fn encode_item<'py>(
        &self,
        py: Python<'py>,
        out: &mut Vec<u8>,
        item: Item<'py>,
    ) -> PyResult<PyObject> {
        out.clear();
        match self.write(py, out, &item) {
            Ok(Ok(())) => Ok(PyBytes::new(py, out).into_any().unbind()),
            Ok(Err(Unsure)) => self.python.call_method1(
                py,
                intern!(py, "encode"),
                PyTuple::new(py, [item.0, item.1, item.2, item.3, item.4, item.5])?,
            ),
            Err(error) => Err(error),
        }
    }

    fn write<'py>(
        &self,
        py: Python<'py>,
        out: &mut Vec<u8>,
        item: &Item<'py>,
    ) -> PyResult<Result<(), Unsure>> {
        let (key, event_ts, stream_time, windows, partition, offset) = item;
        let count = intern!(py, "count");
        out.extend_from_slice(b"{\"key\":");
        let head = push_value(out, key, 0)
            .and_then(|()| {
                out.extend_from_slice(b",\"event_ts\":");
                push_value(out, event_ts, 0)
            })
            .and_then(|()| {
                out.extend_from_slice(b",\"stream_time\":");
                push_value(out, stream_time, 0)
            });
        if head.is_err() {
            return Ok(head);
        }
        out.extend_from_slice(b",\"windows\":{");
        // each window name's JSON text in `out` (equal texts: equal names, one dict key)
        let mut names: Vec<(usize, usize)> = Vec::new();
        for (i, window) in windows.try_iter()?.enumerate() {
            let Ok((name, start, end, lowered)) = window?.extract::<(
                Bound<'py, PyAny>,
                Bound<'py, PyAny>,
                Bound<'py, PyAny>,
                Bound<'py, PyAny>,
            )>() else {
                return Ok(Err(Unsure)); // the Python encoder raises its error
            };
            let Ok(lowered) = lowered.downcast_exact::<PyDict>() else {
                return Ok(Err(Unsure));
            };
            if i > 0 {
                out.push(b',');
            }
            let at = out.len();
            if name.downcast_exact::<PyString>().is_err() || push_value(out, &name, 0).is_err() {
                return Ok(Err(Unsure));
            }
            let text = &out[at..];
            if names.iter().any(|&(a, b)| out[a..b] == *text) {
                return Ok(Err(Unsure)); // a dict keeps one of them
            }
            names.push((at, out.len()));
            out.extend_from_slice(b":{\"start\":");
            let Some(count_value) = lowered.get_item(count)? else {
                return Ok(Err(Unsure)); // the Python encoder raises its KeyError
            };
            let done = push_value(out, &start, 0)
                .and_then(|()| {
                    out.extend_from_slice(b",\"end\":");
                    push_value(out, &end, 0)
                })
                .and_then(|()| {
                    out.extend_from_slice(b",\"count\":");
                    push_value(out, &count_value, 0)
                });
            if done.is_err() {
                return Ok(done);
            }
            out.extend_from_slice(b",\"aggregates\":");
            if self.whole {
                if push_value(out, lowered.as_any(), 1).is_err() {
                    return Ok(Err(Unsure));
                }
            } else {
                out.push(b'{');
                for (j, name) in self.aggregations.iter().enumerate() {
                    let Some(v) = lowered.get_item(name.bind(py))? else {
                        return Ok(Err(Unsure));
                    };
                    if j > 0 {
                        out.push(b',');
                    }
                    push_str(out, name.bind(py).to_str()?);
                    out.push(b':');
                    if push_value(out, &v, 2).is_err() {
                        return Ok(Err(Unsure));
                    }
                }
                out.push(b'}');
            }
            out.push(b'}');
        }
        out.extend_from_slice(b"},\"input_partition\":");
        let tail = push_value(out, partition, 0).and_then(|()| {
            out.extend_from_slice(b",\"input_offset\":");
            push_value(out, offset, 0)
        });
        out.push(b'}');
        Ok(tail)
    }
}

/// Registers the classes of this module in `stores._native`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyEventParser>()?;
    m.add_class::<PyAggregateEncoder>()?;
    Ok(())
}
