//! `score_rows(entries, values_of, values_once, min_grade, unshown_count, not_scored)`: the row
//! of each kept query of `replay`'s batch (`streameval.replay.batch.score`), what
//! `Scorer.values_once` gives for it. This finds what a query's values depend on, its signature
//! (the rank and grade of each shown relevant item, the grades of the relevant items not shown),
//! as `values_once` finds it, and takes the values from `values_of(hits, unshown)`, the Python
//! code that computes them, once per signature: so the values are Python's, to the bit. A query
//! this does not read (a shown list held as a tuple, a grade that is not a float or is NaN, an
//! item that is not a string) is handed to `values_once` itself. And `exact_partials(values)`:
//! a column of values as the floats `math.fsum` keeps of it, their exact sum the values'.

use std::collections::HashMap;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyFloat, PyList, PyString, PyTuple};

use crate::SEP;

/// Signatures remembered at once (the table is cleared when full), as `values_once`'s.
const TABLE_SIZE: usize = 65536;

/// A signature with each grade as its bits: equal keys have the same numbers, so the values
/// computed for one are the values of the other.
type Key = (Vec<(usize, u64)>, Vec<u64>);

/// The hits (rank, grade) and the unshown relevant grades of one query, or None when Python
/// must read it.
struct Signature<'py> {
    hits: Vec<(usize, f64, Bound<'py, PyAny>)>,
    unshown: Vec<(f64, Bound<'py, PyAny>)>,
}

/// The first rank (1-based) of `item` in `shown` (SEP item SEP ... SEP, no item holding SEP), as
/// `rank_in` finds it: where SEP item SEP first occurs is where the first item equal to it is.
/// None when it is not there; Err when `shown` is not of that form (the caller then leaves the
/// query to Python).
pub(crate) fn rank_in(shown: &str, item: &str) -> Result<Option<usize>, ()> {
    let inner = shown
        .strip_prefix(SEP)
        .and_then(|s| s.strip_suffix(SEP))
        .ok_or(())?;
    if item.contains(SEP) {
        return Ok(None);
    }
    Ok(inner
        .split(SEP)
        .position(|part| part == item)
        .map(|i| i + 1))
}

fn signature<'py>(
    items: &Bound<'py, PyAny>,
    best: &Bound<'py, PyAny>,
    min_grade: f64,
    unshown_count: bool,
) -> PyResult<Option<Signature<'py>>> {
    let (Ok(items), Ok(best)) = (items.cast_exact::<PyString>(), best.cast_exact::<PyDict>())
    else {
        return Ok(None);
    };
    let Ok(shown) = items.to_str() else {
        return Ok(None);
    };
    let mut found = Signature {
        hits: Vec::new(),
        unshown: Vec::new(),
    };
    for (item, grade) in best.iter() {
        let Ok(value) = grade.cast_exact::<PyFloat>().map(|g| g.value()) else {
            return Ok(None);
        };
        if value.is_nan() {
            return Ok(None); // Python's sort and comparisons decide
        }
        if value < min_grade {
            continue;
        }
        let Ok(item) = item.cast_exact::<PyString>() else {
            return Ok(None);
        };
        let Ok(name) = item.to_str() else {
            return Ok(None);
        };
        let Ok(rank) = rank_in(shown, name) else {
            return Ok(None);
        };
        match rank {
            Some(rank) => found.hits.push((rank, value, grade)),
            None if unshown_count => found.unshown.push((value, grade)),
            None => {}
        }
    }
    // as Python sorts them: ranks are distinct (an item's first rank), equal grades keep their
    // order (a stable sort) and no grade is NaN
    found.hits.sort_by_key(|hit| hit.0);
    found
        .unshown
        .sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap_or(std::cmp::Ordering::Equal));
    Ok(Some(found))
}

/// The rows of `entries` (the kept queries, `[ts, group, items, best]`): `not_scored` for a
/// query without a grade, else `(|G|, values)` as `values_once` gives them.
#[pyfunction]
pub fn score_rows<'py>(
    entries: &Bound<'py, PyList>,
    values_of: &Bound<'py, PyAny>,
    values_once: &Bound<'py, PyAny>,
    min_grade: f64,
    unshown_count: bool,
    not_scored: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyList>> {
    let py = entries.py();
    let rows = PyList::empty(py);
    let nothing_relevant = PyTuple::new(
        py,
        [0i64.into_pyobject(py)?.into_any(), py.None().into_bound(py)],
    )?;
    let mut table: HashMap<Key, Py<PyAny>> = HashMap::new();
    for entry in entries.iter() {
        let best = entry.get_item(3)?;
        if best.is_none() {
            rows.append(not_scored)?;
            continue;
        }
        let items = entry.get_item(2)?;
        let Some(found) = signature(&items, &best, min_grade, unshown_count)? else {
            rows.append(values_once.call1((items, best.call_method0("items")?))?)?;
            continue;
        };
        if found.hits.is_empty() && found.unshown.is_empty() {
            rows.append(&nothing_relevant)?;
            continue;
        }
        let key: Key = (
            found
                .hits
                .iter()
                .map(|(rank, value, _)| (*rank, value.to_bits()))
                .collect(),
            found
                .unshown
                .iter()
                .map(|(value, _)| value.to_bits())
                .collect(),
        );
        if let Some(known) = table.get(&key) {
            rows.append(known.bind(py))?;
            continue;
        }
        let hits = PyList::empty(py);
        for (rank, _, grade) in found.hits.iter() {
            hits.append(PyTuple::new(
                py,
                [(*rank).into_pyobject(py)?.into_any(), grade.clone()],
            )?)?;
        }
        let unshown = PyList::new(py, found.unshown.iter().map(|(_, grade)| grade))?;
        let known = values_of.call1((hits, unshown))?;
        if table.len() >= TABLE_SIZE {
            table.clear();
        }
        table.insert(key, known.clone().unbind());
        rows.append(known)?;
    }
    Ok(rows)
}

/// Adds `x` to `partials` as CPython's `math.fsum` does (Shewchuk's algorithm): the partials stay
/// floats whose exact sum is the exact sum of everything added. Err when the sum leaves the
/// finite floats (fsum then raises, or returns inf or NaN: the caller leaves that to it).
fn add_exactly(partials: &mut Vec<f64>, x: f64) -> Result<(), ()> {
    let mut x = x;
    let mut kept = 0;
    for j in 0..partials.len() {
        let mut y = partials[j];
        if x.abs() < y.abs() {
            std::mem::swap(&mut x, &mut y);
        }
        let hi = x + y;
        let lo = y - (hi - x);
        if lo != 0.0 {
            partials[kept] = lo;
            kept += 1;
        }
        x = hi;
    }
    partials.truncate(kept);
    if x != 0.0 {
        if !x.is_finite() {
            return Err(());
        }
        partials.push(x);
    }
    Ok(())
}

/// For a column of one metric's values (floats), floats whose exact sums are the exact sums of
/// the values and of their squares (each square rounded, as `x * x`): `math.fsum` of them, with
/// anything else, is `math.fsum` of the values (or squares) with it. None when a value is not a
/// float, or a value, square or sum is not finite (the caller sums the values in Python).
#[pyfunction]
pub fn exact_partials(values: &Bound<'_, PyAny>) -> PyResult<Option<(Vec<f64>, Vec<f64>)>> {
    let mut sums: Vec<f64> = Vec::new();
    let mut squares: Vec<f64> = Vec::new();
    for value in values.try_iter()? {
        let Ok(x) = value?.cast_exact::<PyFloat>().map(|x| x.value()) else {
            return Ok(None);
        };
        if !x.is_finite()
            || add_exactly(&mut sums, x).is_err()
            || add_exactly(&mut squares, x * x).is_err()
        {
            return Ok(None);
        }
    }
    Ok(Some((sums, squares)))
}
