//! streameval's optional native core: the per-record work that is a pure function of a
//! record's bytes, the join's deadlines and the JSON of a checkpoint's queries, in compiled code.
//!
//! The pure-Python core stays the reference. Each function here returns exactly what its
//! Python counterpart returns, or None where it leaves the record to the Python code (anything
//! unusual: a record to reject, a field of an unexpected type, a duplicated key). It never
//! decides a rejection, so a record is rejected, with the same reason, by the same Python code
//! with or without it. `tests/test_native.py` holds the two equal (property tests).
//!
//! - `Impressions(group_by).decode(raw)` and `event(raw, grades, default_type)`: the fast paths of
//!   `streameval.records.decode_impression_fields` and `decode_event_fields`. A `ts` given as a
//!   string comes back as that string, for the caller to read as the Python fast path does.
//!   `decode_compact` gives the shown list joined as `streameval.scoring.query.compact` does.
//! - `Impressions.decode_lines(data, limit, labels)` and `event_lines(data, grades, default_type,
//!   limit)`: `replay`'s reading of a block of whole lines in one call (`read_lines`), each line
//!   as above, and a line left to Python (or past the event-time guard's `limit`) as its bytes.
//!   `Impressions.decode_values(values, limit, labels)` and `event_values(values, grades,
//!   default_type, limit)`: the same for a list of Kafka records' values (`read_values`), for
//!   the daemon; a value left to Python comes back as it was.
//! - `Impressions.shard_lines(data, limit, labels, shard, shards)` and `event_shard_lines(data,
//!   grades, default_type, limit, shard, shards)`: `decode_lines` and `event_lines` for one of
//!   the processes of a replay, each reading every line but decoding only the lines of its
//!   shard's queries (`shard_lines`; `streameval.replay.files.Decoding.shard`).
//! - `murmur2(data)` and `Placement(partitions).partition_of(query_id)`: Kafka's murmur2, as
//!   `streameval.kafka.placement`.
//! - `batch_records(buffer, pos, count, base_offset, first_timestamp, log_append_time,
//!   timestamp_type)`: the records of a Kafka record batch (message format v2) as kafka-python's
//!   `DefaultRecordBatch` reads them, and `consumer_records(...)` as the `ConsumerRecord`s its
//!   fetcher makes of them (`batches.rs`), for `streameval.kafka.batches`.
//! - `Deadlines()`: `streameval.deadlines.Deadlines` (`deadlines.rs`), the join's pending items.
//! - `pack_entries(keys, open, tombstones, no_grades)`: the query entries of a checkpoint's packs
//!   as JSON (`packs.rs`), for `streameval.state`.
//! - `score_rows(entries, values_of, values_once, min_grade, unshown_count, not_scored)`: the row
//!   of each query of `replay`'s batch, its values computed by Python once per signature, and
//!   `exact_partials(values)`, a column of values as the floats `math.fsum` keeps of it, so that a
//!   process of `replay` sends those instead of its values (`score.rs`), for
//!   `streameval.replay.batch`.
//! - `Grader(min_grade, ignore_unshown, ap_ks, dcg_ks, exp_gain, no_grades, fallback).add_grade(
//!   state, item, grade)`: `Scorer.add_grade`, the daemon's scoring of one attributed event, on
//!   the same `QueryScore` (`grade.rs`), for `streameval.join`.

mod batches;
mod deadlines;
mod grade;
mod packs;
mod score;

use std::borrow::Cow;
use std::fmt;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyFloat, PyList, PyString, PyTuple};
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

/// The label of a group field that is absent or null (`streameval.records.UNKNOWN_GROUP`).
const UNKNOWN_GROUP: &str = "unknown";

/// A top-level value of a record, as far as the fast paths look into it.
enum Val<'a> {
    Null,
    Str(Cow<'a, str>),
    I64(i64),
    U64(u64),
    F64(f64),
    /// an array of scalars (items); an element that is an array or object is `Other`
    Arr(Vec<Val<'a>>),
    /// anything else: a boolean, an object, an array inside an array
    Other,
}

struct ValVisitor {
    /// whether an array here is read element by element (top level) or skipped (nested)
    top: bool,
}

impl<'de> Visitor<'de> for ValVisitor {
    type Value = Val<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_unit<E>(self) -> Result<Val<'de>, E> {
        Ok(Val::Null)
    }
    fn visit_none<E>(self) -> Result<Val<'de>, E> {
        Ok(Val::Null)
    }
    fn visit_bool<E>(self, _: bool) -> Result<Val<'de>, E> {
        Ok(Val::Other)
    }
    fn visit_i64<E>(self, v: i64) -> Result<Val<'de>, E> {
        Ok(Val::I64(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Val<'de>, E> {
        Ok(Val::U64(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Val<'de>, E> {
        Ok(Val::F64(v))
    }
    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Val<'de>, E> {
        Ok(Val::Str(Cow::Borrowed(v)))
    }
    fn visit_str<E>(self, v: &str) -> Result<Val<'de>, E> {
        Ok(Val::Str(Cow::Owned(v.to_owned())))
    }
    fn visit_string<E>(self, v: String) -> Result<Val<'de>, E> {
        Ok(Val::Str(Cow::Owned(v)))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Val<'de>, A::Error> {
        if !self.top {
            while seq.next_element::<Skip>()?.is_some() {}
            return Ok(Val::Other);
        }
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(16));
        while let Some(v) = seq.next_element_seed(ValSeed { top: false })? {
            out.push(v);
        }
        Ok(Val::Arr(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Val<'de>, A::Error> {
        while map.next_entry::<Skip, Skip>()?.is_some() {}
        Ok(Val::Other)
    }
}

/// A value read whole and dropped. Not serde's `IgnoredAny`: serde_json skips an ignored value
/// without checking what orjson checks (a lone surrogate escape, a number too large for a
/// double), so a record orjson rejects would pass.
struct Skip;

impl<'de> de::Deserialize<'de> for Skip {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Skip, D::Error> {
        struct SkipVisitor;
        impl<'de> Visitor<'de> for SkipVisitor {
            type Value = Skip;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_unit<E>(self) -> Result<Skip, E> {
                Ok(Skip)
            }
            fn visit_bool<E>(self, _: bool) -> Result<Skip, E> {
                Ok(Skip)
            }
            fn visit_i64<E>(self, _: i64) -> Result<Skip, E> {
                Ok(Skip)
            }
            fn visit_u64<E>(self, _: u64) -> Result<Skip, E> {
                Ok(Skip)
            }
            fn visit_f64<E>(self, _: f64) -> Result<Skip, E> {
                Ok(Skip)
            }
            fn visit_borrowed_str<E>(self, _: &'de str) -> Result<Skip, E> {
                Ok(Skip)
            }
            fn visit_str<E>(self, _: &str) -> Result<Skip, E> {
                Ok(Skip)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Skip, A::Error> {
                while seq.next_element::<Skip>()?.is_some() {}
                Ok(Skip)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Skip, A::Error> {
                while map.next_entry::<Skip, Skip>()?.is_some() {}
                Ok(Skip)
            }
        }
        d.deserialize_any(SkipVisitor)
    }
}

struct ValSeed {
    top: bool,
}

impl<'de> DeserializeSeed<'de> for ValSeed {
    type Value = Val<'de>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Val<'de>, D::Error> {
        d.deserialize_any(ValVisitor { top: self.top })
    }
}

/// A key of the top-level object, borrowed when it has no escapes.
struct Key<'a>(Cow<'a, str>);

impl<'de> de::Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a key")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

/// The values of the wanted keys of a top-level JSON object; None when the text is not one
/// object (with nothing but blanks after it) or names a wanted key twice.
struct Picked<'a> {
    values: Vec<Option<Val<'a>>>,
}

struct PickVisitor<'k, S> {
    wanted: &'k [S],
}

impl<'de, S: AsRef<str>> Visitor<'de> for PickVisitor<'_, S> {
    type Value = Option<Picked<'de>>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut values: Vec<Option<Val<'de>>> = (0..self.wanted.len()).map(|_| None).collect();
        let mut twice = false;
        while let Some(Key(key)) = map.next_key::<Key>()? {
            match self.wanted.iter().position(|w| w.as_ref() == key) {
                Some(i) => {
                    let v = map.next_value_seed(ValSeed { top: true })?;
                    twice |= values[i].is_some();
                    values[i] = Some(v);
                }
                None => {
                    map.next_value::<Skip>()?;
                }
            }
        }
        Ok(if twice { None } else { Some(Picked { values }) })
    }
}

fn pick<'a, S: AsRef<str>>(text: &'a str, wanted: &[S]) -> Option<Picked<'a>> {
    let mut d = serde_json::Deserializer::from_str(text);
    let picked = d.deserialize_map(PickVisitor { wanted }).ok()??;
    d.end().ok()?;
    Some(picked)
}

impl<'a> Picked<'a> {
    fn take(&mut self, i: usize) -> Option<Val<'a>> {
        self.values[i].take()
    }
}

/// The text of a record given as bytes or str; None when it is not UTF-8 (orjson rejects it).
fn text_of<'py>(raw: &'py Bound<'py, PyAny>) -> Option<Cow<'py, str>> {
    if let Ok(b) = raw.cast::<PyBytes>() {
        return std::str::from_utf8(b.as_bytes()).ok().map(Cow::Borrowed);
    }
    if let Ok(s) = raw.cast::<PyString>() {
        return s.to_cow().ok();
    }
    None
}

/// `ts` as the fast paths take it: a number (as a float) or a string (left to the caller).
/// A negative zero is left to Python: serde_json reads `-0` as -0.0, orjson as the integer 0.
fn ts_object<'py>(py: Python<'py>, v: Option<Val>) -> Option<Bound<'py, PyAny>> {
    Some(match v? {
        Val::F64(f) if f == 0.0 && f.is_sign_negative() => return None,
        Val::F64(f) => PyFloat::new(py, f).into_any(),
        Val::I64(i) => PyFloat::new(py, i as f64).into_any(),
        Val::U64(u) => PyFloat::new(py, u as f64).into_any(),
        Val::Str(s) => PyString::new(py, &s).into_any(),
        _ => return None,
    })
}

fn string<'py>(py: Python<'py>, v: Option<Val>) -> Option<Bound<'py, PyString>> {
    match v? {
        Val::Str(s) => Some(PyString::new(py, &s)),
        _ => None,
    }
}

/// An item id: a string, or an integer as its decimal text (`str(5)` is `"5"`).
fn item_id<'py>(py: Python<'py>, v: Val) -> Option<Bound<'py, PyString>> {
    match v {
        Val::Str(s) => Some(PyString::new(py, &s)),
        Val::I64(i) => Some(PyString::new(py, &i.to_string())),
        Val::U64(u) => Some(PyString::new(py, &u.to_string())),
        _ => None,
    }
}

const IMPRESSION_KEYS: [&str; 3] = ["query_id", "ts", "items"];
/// `streameval.scoring.query.SEP`: joins a shown list into one string
const SEP: char = '\x7f';

/// SEP item SEP item ... SEP of item ids (strings, or integers as their decimal text); None
/// when an item holds SEP (the list stays a list) or is not an id (the caller's path decides).
fn joined(values: &[Val]) -> Option<String> {
    let mut out = String::with_capacity(values.len() * 8 + 1);
    out.push(SEP);
    for v in values {
        match v {
            Val::Str(s) => {
                if s.contains(SEP) {
                    return None;
                }
                out.push_str(s);
            }
            Val::I64(i) => out.push_str(&i.to_string()),
            Val::U64(u) => out.push_str(&u.to_string()),
            _ => return None,
        }
        out.push(SEP);
    }
    Some(out)
}

/// The impressions' fast path for one set of group fields: the keys it reads, each once (a
/// group field may share a name with another field), and where each label's value is among
/// them -- worked out once, not per record.
#[pyclass(frozen, module = "streameval_native")]
struct Impressions {
    wanted: Vec<String>,
    slot_of_label: Vec<usize>,
}

#[pymethods]
impl Impressions {
    #[new]
    fn new(group_by: Vec<String>) -> Self {
        let mut wanted: Vec<String> = IMPRESSION_KEYS.iter().map(|k| k.to_string()).collect();
        let mut slot_of_label = Vec::with_capacity(group_by.len());
        for name in group_by {
            let slot = match wanted.iter().position(|w| *w == name) {
                Some(i) => i,
                None => {
                    wanted.push(name);
                    wanted.len() - 1
                }
            };
            slot_of_label.push(slot);
        }
        Impressions { wanted, slot_of_label }
    }

    /// `(query_id, ts, items, group)` of a well-formed impression, as the fast path of
    /// `decode_impression_fields` gives it (`ts` a float, or the string it was), else None.
    fn decode<'py>(&self, py: Python<'py>, raw: &Bound<'py, PyAny>) -> PyResult<Option<Bound<'py, PyTuple>>> {
        self.tuple(py, raw, false)
    }

    /// As `decode`, with the shown list as `compact` in `streameval.scoring.query` makes it
    /// (SEP item SEP item ... SEP, or the list when an item holds SEP), built here in one
    /// string rather than as a list of strings joined in Python.
    fn decode_compact<'py>(
        &self,
        py: Python<'py>,
        raw: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyTuple>>> {
        self.tuple(py, raw, true)
    }

    /// The lines of `data` (JSONL, whole lines) as `decode_compact` reads each, for replay:
    /// `(records, slow)` as `read_lines` gives them, the group tuple taken from `labels` (set
    /// there when new); a `ts` past `limit` (the event-time guard's) is left to Python.
    fn decode_lines<'py>(
        &self,
        py: Python<'py>,
        data: &[u8],
        limit: f64,
        labels: &Bound<'py, PyDict>,
    ) -> PyResult<(Bound<'py, PyList>, Vec<usize>)> {
        read_lines(py, data, |text| self.compact_within(py, text, limit, labels))
    }

    /// `decode_lines` for one of `shards` processes sharing a replay, each reading every line:
    /// `(records, slow, everyone)` as the function `shard_lines` gives them.
    fn shard_lines<'py>(
        &self,
        py: Python<'py>,
        data: &[u8],
        limit: f64,
        labels: &Bound<'py, PyDict>,
        shard: u32,
        shards: u32,
    ) -> PyResult<(Bound<'py, PyList>, Vec<usize>, Vec<usize>)> {
        shard_lines(py, data, shard, shards, &self.wanted, |picked| self.picked_within(py, picked, limit, labels))
    }

    /// The values of a list (Kafka records' values: bytes, or None) as `decode_lines` reads
    /// each line, for the daemon: `(records, slow)` as `read_values` gives them.
    fn decode_values<'py>(
        &self,
        py: Python<'py>,
        values: &Bound<'py, PyList>,
        limit: f64,
        labels: &Bound<'py, PyDict>,
    ) -> PyResult<(Bound<'py, PyList>, Vec<usize>)> {
        read_values(py, values, |text| self.compact_within(py, text, limit, labels))
    }
}

impl Impressions {
    /// `decode_compact`'s tuple of one record whose `ts` is a number no later than `limit`,
    /// its group tuple taken from `labels` (set there when new), else None.
    fn compact_within<'py>(
        &self,
        py: Python<'py>,
        text: &str,
        limit: f64,
        labels: &Bound<'py, PyDict>,
    ) -> PyResult<Option<Bound<'py, PyTuple>>> {
        let Some(picked) = pick(text, &self.wanted) else { return Ok(None) };
        self.picked_within(py, picked, limit, labels)
    }

    /// `compact_within` of a record already picked.
    fn picked_within<'py>(
        &self,
        py: Python<'py>,
        picked: Picked,
        limit: f64,
        labels: &Bound<'py, PyDict>,
    ) -> PyResult<Option<Bound<'py, PyTuple>>> {
        let Some([query_id, ts, items, group]) = self.fields_of(py, picked, true)? else { return Ok(None) };
        if !within(&ts, limit) {
            return Ok(None);
        }
        let group = match labels.get_item(&group)? {
            Some(known) => known,
            None => {
                labels.set_item(&group, &group)?;
                group
            }
        };
        PyTuple::new(py, [query_id, ts, items, group]).map(Some)
    }

    fn tuple<'py>(&self, py: Python<'py>, raw: &Bound<'py, PyAny>, compact: bool) -> PyResult<Option<Bound<'py, PyTuple>>> {
        let Some(text) = text_of(raw) else { return Ok(None) };
        let parts = self.fields(py, &text, compact)?;
        parts.map(|p| PyTuple::new(py, p)).transpose()
    }

    /// `[query_id, ts, items, group]` of a well-formed impression, or None.
    fn fields<'py>(&self, py: Python<'py>, text: &str, compact: bool) -> PyResult<Option<[Bound<'py, PyAny>; 4]>> {
        let Some(picked) = pick(text, &self.wanted) else { return Ok(None) };
        self.fields_of(py, picked, compact)
    }

    fn fields_of<'py>(&self, py: Python<'py>, mut picked: Picked, compact: bool) -> PyResult<Option<[Bound<'py, PyAny>; 4]>> {
        // labels first: a label may read the same value as query_id or ts
        let mut labels = Vec::with_capacity(self.slot_of_label.len());
        for &slot in &self.slot_of_label {
            labels.push(match &picked.values[slot] {
                None | Some(Val::Null) => PyString::new(py, UNKNOWN_GROUP),
                Some(Val::Str(s)) => PyString::new(py, s),
                Some(_) => return Ok(None),
            });
        }
        let Some(query_id) = string(py, picked.take(0)) else { return Ok(None) };
        let Some(ts) = ts_object(py, picked.take(1)) else { return Ok(None) };
        let Some(Val::Arr(values)) = picked.take(2) else { return Ok(None) };
        if values.is_empty() {
            return Ok(None);
        }
        let group = PyTuple::new(py, labels)?.into_any();
        if compact {
            if let Some(joined) = joined(&values) {
                return Ok(Some([query_id.into_any(), ts, PyString::new(py, &joined).into_any(), group]));
            }
        }
        let mut items = Vec::with_capacity(values.len());
        for v in values {
            let Some(id) = item_id(py, v) else { return Ok(None) };
            items.push(id);
        }
        let items = PyList::new(py, items)?.into_any();
        Ok(Some([query_id.into_any(), ts, items, group]))
    }
}

/// The lines of JSONL text, each with its line end, as Python's binary file iteration gives
/// them, but for blank ones (only ASCII white space: ``bytes.isspace()``), which are not records.
fn lines(data: &[u8]) -> impl Iterator<Item = &[u8]> {
    data.split_inclusive(|&b| b == b'\n')
        .filter(|line| !line.iter().all(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r' | b'\x0b' | b'\x0c')))
}

/// The lines of `data` decoded by `decode` (None: left to Python), for replay: `(records, slow)`.
/// `records` holds, in order, one entry per line that is not blank: what `decode` made of it,
/// or the line's bytes when Python must decide (not UTF-8, or `decode` left it); `slow` holds
/// the indexes of those.
fn read_lines<'py>(
    py: Python<'py>,
    data: &[u8],
    mut decode: impl FnMut(&str) -> PyResult<Option<Bound<'py, PyTuple>>>,
) -> PyResult<(Bound<'py, PyList>, Vec<usize>)> {
    let records = PyList::empty(py);
    let mut slow = Vec::new();
    for line in lines(data) {
        let decoded = match std::str::from_utf8(line) {
            Ok(text) => decode(text)?,
            Err(_) => None,
        };
        append(&records, &mut slow, decoded, || PyBytes::new(py, line).into_any())?;
    }
    Ok((records, slow))
}

/// Which partition the default partitioner gives a key (`Placement`), and so which of `shards`
/// processes replays a query (`shard_lines`): murmur2 of its UTF-8 bytes.
fn shard_of(key: &[u8], shards: u32) -> u32 {
    (murmur2_of(key) & 0x7fff_ffff) % shards.max(1)
}

/// `read_lines` for process `shard` of `shards`, each reading every line of the files: a line
/// whose `query_id` is a string (index 0 of `wanted`) is this process's when the id's shard is
/// `shard`, and is left out otherwise (`decode` never sees it); a line whose id cannot be read
/// here (not UTF-8, not one JSON object, a key named twice, an id of another type) goes to every
/// process as its bytes, for Python to decide: `everyone` holds the indexes of those (a subset
/// of `slow`). So each line is decided by one process, but those, which each decides alike.
fn shard_lines<'py, S: AsRef<str>>(
    py: Python<'py>,
    data: &[u8],
    shard: u32,
    shards: u32,
    wanted: &[S],
    mut decode: impl FnMut(Picked) -> PyResult<Option<Bound<'py, PyTuple>>>,
) -> PyResult<(Bound<'py, PyList>, Vec<usize>, Vec<usize>)> {
    let records = PyList::empty(py);
    let mut slow = Vec::new();
    let mut everyone = Vec::new();
    for line in lines(data) {
        let picked = std::str::from_utf8(line).ok().and_then(|text| pick(text, wanted));
        let owner = match &picked {
            Some(Picked { values }) => match &values[0] {
                Some(Val::Str(id)) => Some(shard_of(id.as_bytes(), shards)),
                _ => None,
            },
            None => None,
        };
        let decoded = match (owner, picked) {
            (Some(owner), _) if owner != shard => continue,
            (Some(_), Some(picked)) => decode(picked)?,
            _ => {
                everyone.push(records.len());
                None
            }
        };
        append(&records, &mut slow, decoded, || PyBytes::new(py, line).into_any())?;
    }
    Ok((records, slow, everyone))
}

/// The values of `values` decoded by `decode` (None: left to Python), for the daemon:
/// `(records, slow)`, `records` holding what `decode` made of each value, or the value itself
/// where Python must decide (not bytes, not UTF-8, or `decode` left it), `slow` the indexes of
/// those.
fn read_values<'py>(
    py: Python<'py>,
    values: &Bound<'py, PyList>,
    mut decode: impl FnMut(&str) -> PyResult<Option<Bound<'py, PyTuple>>>,
) -> PyResult<(Bound<'py, PyList>, Vec<usize>)> {
    let records = PyList::empty(py);
    let mut slow = Vec::new();
    for value in values.iter() {
        let decoded = match value.cast::<PyBytes>() {
            Ok(b) => match std::str::from_utf8(b.as_bytes()) {
                Ok(text) => decode(text)?,
                Err(_) => None,
            },
            Err(_) => None,
        };
        append(&records, &mut slow, decoded, || value.clone())?;
    }
    Ok((records, slow))
}

/// One entry of `(records, slow)`: what the decoder made of it, or, where it left it (None),
/// `fallback()` for Python to decide, its index noted in `slow`.
fn append<'py>(
    records: &Bound<'py, PyList>,
    slow: &mut Vec<usize>,
    decoded: Option<Bound<'py, PyTuple>>,
    fallback: impl FnOnce() -> Bound<'py, PyAny>,
) -> PyResult<()> {
    match decoded {
        Some(record) => records.append(record),
        None => {
            slow.push(records.len());
            records.append(fallback())
        }
    }
}

/// Whether `ts` is a number no later than `limit` (a string is left to Python).
fn within(ts: &Bound<PyAny>, limit: f64) -> bool {
    match ts.cast::<PyFloat>() {
        Ok(f) => f.value() <= limit,
        Err(_) => false,
    }
}

const EVENT_KEYS: [&str; 5] = ["query_id", "item", "type", "ts", "event_id"];

/// `(query_id, item, type, ts, event_id)` of a well-formed event whose type has a grade, as
/// the fast path of `decode_event_fields` gives it (`ts` a float, or the string it was), else
/// None. `default_type` stands for an absent or null `type`.
#[pyfunction]
#[pyo3(signature = (raw, grades, default_type=None))]
fn event<'py>(
    py: Python<'py>,
    raw: &Bound<'py, PyAny>,
    grades: &Bound<'py, PyAny>,
    default_type: Option<Bound<'py, PyString>>,
) -> PyResult<Option<Bound<'py, PyTuple>>> {
    let Some(text) = text_of(raw) else { return Ok(None) };
    let parts = event_fields(py, &text, grades, default_type.as_ref())?;
    parts.map(|p| PyTuple::new(py, p)).transpose()
}

/// The lines of `data` as `event` reads each, for replay: `(records, slow)` as `read_lines`
/// gives them; a `ts` past `limit` (the event-time guard's) is left to Python.
#[pyfunction]
#[pyo3(signature = (data, grades, default_type, limit))]
fn event_lines<'py>(
    py: Python<'py>,
    data: &[u8],
    grades: &Bound<'py, PyAny>,
    default_type: Option<Bound<'py, PyString>>,
    limit: f64,
) -> PyResult<(Bound<'py, PyList>, Vec<usize>)> {
    read_lines(py, data, |text| event_within(py, text, grades, default_type.as_ref(), limit))
}

/// `event_lines` for one of `shards` processes sharing a replay: `(records, slow, everyone)`
/// as `shard_lines` gives them.
#[pyfunction]
#[pyo3(signature = (data, grades, default_type, limit, shard, shards))]
fn event_shard_lines<'py>(
    py: Python<'py>,
    data: &[u8],
    grades: &Bound<'py, PyAny>,
    default_type: Option<Bound<'py, PyString>>,
    limit: f64,
    shard: u32,
    shards: u32,
) -> PyResult<(Bound<'py, PyList>, Vec<usize>, Vec<usize>)> {
    shard_lines(py, data, shard, shards, &EVENT_KEYS, |picked| {
        match event_picked(py, picked, grades, default_type.as_ref())? {
            Some(p) if within(&p[3], limit) => PyTuple::new(py, p).map(Some),
            _ => Ok(None),
        }
    })
}

/// The values of a list (Kafka records' values) as `event_lines` reads each line, for the
/// daemon: `(records, slow)` as `read_values` gives them.
#[pyfunction]
#[pyo3(signature = (values, grades, default_type, limit))]
fn event_values<'py>(
    py: Python<'py>,
    values: &Bound<'py, PyList>,
    grades: &Bound<'py, PyAny>,
    default_type: Option<Bound<'py, PyString>>,
    limit: f64,
) -> PyResult<(Bound<'py, PyList>, Vec<usize>)> {
    read_values(py, values, |text| event_within(py, text, grades, default_type.as_ref(), limit))
}

/// `event`'s tuple of one record whose `ts` is a number no later than `limit`, else None.
fn event_within<'py>(
    py: Python<'py>,
    text: &str,
    grades: &Bound<'py, PyAny>,
    default_type: Option<&Bound<'py, PyString>>,
    limit: f64,
) -> PyResult<Option<Bound<'py, PyTuple>>> {
    match event_fields(py, text, grades, default_type)? {
        Some(p) if within(&p[3], limit) => PyTuple::new(py, p).map(Some),
        _ => Ok(None),
    }
}

fn event_fields<'py>(
    py: Python<'py>,
    text: &str,
    grades: &Bound<'py, PyAny>,
    default_type: Option<&Bound<'py, PyString>>,
) -> PyResult<Option<[Bound<'py, PyAny>; 5]>> {
    let Some(picked) = pick(text, &EVENT_KEYS) else { return Ok(None) };
    event_picked(py, picked, grades, default_type)
}

/// `event_fields` of a record already picked.
fn event_picked<'py>(
    py: Python<'py>,
    mut picked: Picked,
    grades: &Bound<'py, PyAny>,
    default_type: Option<&Bound<'py, PyString>>,
) -> PyResult<Option<[Bound<'py, PyAny>; 5]>> {
    let Some(query_id) = string(py, picked.take(0)) else { return Ok(None) };
    let Some(item) = picked.take(1).and_then(|v| item_id(py, v)) else { return Ok(None) };
    let event_type = match picked.take(2) {
        None | Some(Val::Null) => match default_type {
            Some(t) => t.clone(),
            None => return Ok(None),
        },
        Some(Val::Str(s)) => PyString::new(py, &s),
        Some(_) => return Ok(None),
    };
    let Some(ts) = ts_object(py, picked.take(3)) else { return Ok(None) };
    let event_id = match picked.take(4) {
        None | Some(Val::Null) => py.None().into_bound(py),
        Some(Val::Str(s)) => PyString::new(py, &s).into_any(),
        Some(_) => return Ok(None),
    };
    if !grades.contains(&event_type)? {
        return Ok(None);
    }
    Ok(Some([query_id.into_any(), item.into_any(), event_type.into_any(), ts, event_id]))
}

/// Kafka's murmur2 (`Utils.murmur2` of the Java client, seed 0x9747b28c).
fn murmur2_of(data: &[u8]) -> u32 {
    const M: u32 = 0x5bd1_e995;
    let mut h: u32 = 0x9747_b28c ^ (data.len() as u32);
    let mut chunks = data.chunks_exact(4);
    for c in &mut chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> 24;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M) ^ k;
    }
    let tail = chunks.remainder();
    if !tail.is_empty() {
        if tail.len() == 3 {
            h ^= (tail[2] as u32) << 16;
        }
        if tail.len() >= 2 {
            h ^= (tail[1] as u32) << 8;
        }
        h ^= tail[0] as u32;
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^ (h >> 15)
}

#[pyfunction]
fn murmur2(data: &[u8]) -> u32 {
    murmur2_of(data)
}

/// The partition the default partitioner gives each query id, for a topic of `partitions`
/// partitions: `toPositive(murmur2(key)) % partitions`, the key being the id's UTF-8 bytes.
#[pyclass(frozen, module = "streameval_native")]
struct Placement {
    #[pyo3(get)]
    partitions: u32,
}

#[pymethods]
impl Placement {
    #[new]
    fn new(partitions: u32) -> PyResult<Self> {
        if partitions == 0 {
            return Err(PyValueError::new_err("a topic has at least one partition"));
        }
        Ok(Placement { partitions })
    }

    fn partition_of(&self, query_id: &str) -> u32 {
        shard_of(query_id.as_bytes(), self.partitions)
    }
}

#[pymodule]
fn streameval_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Impressions>()?;
    m.add_function(wrap_pyfunction!(event, m)?)?;
    m.add_function(wrap_pyfunction!(event_lines, m)?)?;
    m.add_function(wrap_pyfunction!(event_values, m)?)?;
    m.add_function(wrap_pyfunction!(event_shard_lines, m)?)?;
    m.add_function(wrap_pyfunction!(murmur2, m)?)?;
    m.add_class::<Placement>()?;
    m.add_class::<batches::Record>()?;
    m.add_function(wrap_pyfunction!(batches::batch_records, m)?)?;
    m.add_function(wrap_pyfunction!(batches::consumer_records, m)?)?;
    m.add_class::<deadlines::Deadlines>()?;
    m.add_function(wrap_pyfunction!(packs::pack_entries, m)?)?;
    m.add_function(wrap_pyfunction!(score::score_rows, m)?)?;
    m.add_function(wrap_pyfunction!(score::exact_partials, m)?)?;
    m.add_class::<grade::Grader>()?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("SEP", SEP.to_string())?;
    Ok(())
}
