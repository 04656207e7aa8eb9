//! `pack_entries(keys, open, tombstones, no_grades)`: the query entries of a checkpoint's packs
//! (`streameval.packs`), each as the JSON text orjson writes of the entry `streameval.state`
//! builds for it, so that a pack is its entries joined. The Python objects are read, never
//! changed. A value of a type this does not write (or a string that is not valid UTF-8) makes it
//! return None, and the caller builds the entries in Python, where orjson decides.

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};

/// A value this encoder leaves to orjson.
struct Unwritable;

type Written = Result<(), Unwritable>;

fn json<T: serde::Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) -> Written {
    // serde_json writes strings escaped as orjson does (quote, backslash and control
    // characters), floats in their shortest round-trip form and a non-finite float as null
    serde_json::to_writer(out, value).map_err(|_| Unwritable)
}

/// The JSON of a value of the types a query's state holds: str, float, int, bool, None, and
/// lists, tuples and str-keyed dicts of them (exact types; anything else is Unwritable).
fn write(out: &mut Vec<u8>, value: &Bound<'_, PyAny>) -> Written {
    if let Ok(s) = value.cast_exact::<PyString>() {
        return json(out, s.to_str().map_err(|_| Unwritable)?);
    }
    if let Ok(x) = value.cast_exact::<PyFloat>() {
        return json(out, &x.value());
    }
    if value.is_none() {
        out.extend_from_slice(b"null");
        return Ok(());
    }
    if let Ok(b) = value.cast_exact::<PyBool>() {
        out.extend_from_slice(if b.is_true() { b"true" } else { b"false" });
        return Ok(());
    }
    if let Ok(i) = value.cast_exact::<PyInt>() {
        if let Ok(n) = i.extract::<i64>() {
            return json(out, &n);
        }
        return json(out, &i.extract::<u64>().map_err(|_| Unwritable)?);
    }
    if let Ok(list) = value.cast_exact::<PyList>() {
        return write_seq(out, list.iter());
    }
    if let Ok(tuple) = value.cast_exact::<PyTuple>() {
        return write_seq(out, tuple.iter());
    }
    if let Ok(dict) = value.cast_exact::<PyDict>() {
        out.push(b'{');
        for (i, (k, v)) in dict.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            let k = k.cast_exact::<PyString>().map_err(|_| Unwritable)?;
            json(out, k.to_str().map_err(|_| Unwritable)?)?;
            out.push(b':');
            write(out, &v)?;
        }
        out.push(b'}');
        return Ok(());
    }
    Err(Unwritable)
}

fn write_seq<'py>(out: &mut Vec<u8>, items: impl Iterator<Item = Bound<'py, PyAny>>) -> Written {
    out.push(b'[');
    for (i, item) in items.enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write(out, &item)?;
    }
    out.push(b']');
    Ok(())
}

/// `[query_id, ts, group, row]` of an open query, row being `QueryScore.to_row()`: the shown
/// list alone while the grades are still `no_grades`, else it and the rest of the state.
fn open_entry(
    out: &mut Vec<u8>,
    query_id: &Bound<'_, PyAny>,
    query: &Bound<'_, PyAny>,
    no_grades: &Bound<'_, PyAny>,
) -> PyResult<Written> {
    let py = query.py();
    let score = query.getattr(intern!(py, "score"))?;
    let items = score.getattr(intern!(py, "items"))?;
    let grade = score.getattr(intern!(py, "grade"))?;
    out.push(b'[');
    let head = [
        query_id.clone(),
        query.getattr(intern!(py, "ts"))?,
        query.getattr(intern!(py, "group"))?,
    ];
    for part in head.iter() {
        if write(out, part).is_err() {
            return Ok(Err(Unwritable));
        }
        out.push(b',');
    }
    out.push(b'[');
    if write(out, &items).is_err() {
        return Ok(Err(Unwritable));
    }
    if !grade.is(no_grades) {
        let rest = [
            grade,
            score.getattr(intern!(py, "hits"))?,
            score.getattr(intern!(py, "ideal"))?,
            score.getattr(intern!(py, "ap_num"))?,
            score.getattr(intern!(py, "dcg"))?,
        ];
        for part in rest.iter() {
            out.push(b',');
            if write(out, part).is_err() {
                return Ok(Err(Unwritable));
            }
        }
    }
    out.extend_from_slice(b"]]");
    Ok(Ok(()))
}

/// For `keys` (the `("q", query_id)` state keys that changed): the keys of the open queries and
/// their entries' JSON, and the keys of the settled ones (`tombstones`: query id -> settling
/// time) and theirs, `[query_id, time]`; a key held by neither is left out. None when a value
/// is of a type this does not write.
#[pyfunction]
#[allow(clippy::type_complexity)]
pub fn pack_entries<'py>(
    keys: &Bound<'py, PyList>,
    open: &Bound<'py, PyDict>,
    tombstones: &Bound<'py, PyDict>,
    no_grades: &Bound<'py, PyAny>,
) -> PyResult<Option<[Bound<'py, PyList>; 4]>> {
    let py = keys.py();
    let [q_keys, q_entries, t_keys, t_entries] = [
        PyList::empty(py),
        PyList::empty(py),
        PyList::empty(py),
        PyList::empty(py),
    ];
    let mut out: Vec<u8> = Vec::with_capacity(512);
    for key in keys.iter() {
        let query_id = key.get_item(1)?;
        out.clear();
        if let Some(query) = open.get_item(&query_id)? {
            if open_entry(&mut out, &query_id, &query, no_grades)?.is_err() {
                return Ok(None);
            }
            q_keys.append(&key)?;
            q_entries.append(PyBytes::new(py, &out))?;
        } else if let Some(settled) = tombstones.get_item(&query_id)? {
            out.push(b'[');
            let written = write(&mut out, &query_id).and_then(|_| {
                out.push(b',');
                write(&mut out, &settled)
            });
            if written.is_err() {
                return Ok(None);
            }
            out.push(b']');
            t_keys.append(&key)?;
            t_entries.append(PyBytes::new(py, &out))?;
        }
    }
    Ok(Some([q_keys, q_entries, t_keys, t_entries]))
}
