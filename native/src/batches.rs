//! Kafka record batches (message format v2) read as kafka-python reads them, for
//! `streameval.kafka.batches`: as kafka-python's `DefaultRecord`s (`batch_records`), or as the
//! `ConsumerRecord`s its fetcher makes of them (`consumer_records`).

use pyo3::exceptions::PyTypeError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyList, PyString, PyTuple, PyType};

/// One record of a batch, with the attributes of kafka-python's `DefaultRecord` that its
/// fetcher reads.
#[pyclass(frozen, module = "streameval_native")]
pub struct Record {
    #[pyo3(get)]
    size_in_bytes: i64,
    #[pyo3(get)]
    offset: i64,
    #[pyo3(get)]
    timestamp: i64,
    #[pyo3(get)]
    timestamp_type: i64,
    #[pyo3(get)]
    key: Option<Py<PyBytes>>,
    #[pyo3(get)]
    value: Option<Py<PyBytes>>,
    #[pyo3(get)]
    headers: Py<PyList>,
}

#[pymethods]
impl Record {
    /// Message format v2 has no checksum per record (the batch has one).
    #[getter]
    fn checksum(&self) -> Option<u32> {
        None
    }
    fn validate_crc(&self) -> bool {
        true
    }
}

/// The fields of one record, as kafka-python's `DefaultRecordBatch._read_msg` reads them, and
/// the size of its headers as kafka-python's fetcher counts it.
struct Fields {
    size_in_bytes: i64,
    offset: i64,
    timestamp: i64,
    key: Option<Py<PyBytes>>,
    value: Option<Py<PyBytes>>,
    headers: Py<PyList>,
    /// the headers' keys (UTF-8) and values in bytes, -1 without headers
    /// (`ConsumerRecord.serialized_header_size`)
    header_size: i64,
}

/// What a batch's header says about its records.
struct Header {
    base_offset: i64,
    first_timestamp: i64,
    /// the batch's max timestamp, which every record takes, for a batch of LOG_APPEND_TIME
    log_append_time: Option<i64>,
}

/// The `count` records of a record batch (message format v2, uncompressed, not a control batch)
/// starting at `pos` of `buffer`, as kafka-python's `DefaultRecordBatch` yields them: offset
/// `base_offset` + delta, timestamp `log_append_time` when given (the batch's max timestamp)
/// else `first_timestamp` + delta. None where anything is unusual (a record that does not parse
/// or whose length disagrees, a header key that is not UTF-8, bytes left over, a value past 64
/// bits), for kafka-python's own reading to raise its error.
#[pyfunction]
#[pyo3(signature = (buffer, pos, count, base_offset, first_timestamp, log_append_time, timestamp_type))]
#[allow(clippy::too_many_arguments)]
pub fn batch_records<'py>(
    py: Python<'py>,
    buffer: &Bound<'py, PyByteArray>,
    pos: usize,
    count: i64,
    base_offset: i64,
    first_timestamp: i64,
    log_append_time: Option<i64>,
    timestamp_type: i64,
) -> PyResult<Option<Bound<'py, PyList>>> {
    let header = Header { base_offset, first_timestamp, log_append_time };
    let records = read_batch(py, buffer, pos, count, &header, |f| {
        let record = Record {
            size_in_bytes: f.size_in_bytes,
            offset: f.offset,
            timestamp: f.timestamp,
            timestamp_type,
            key: f.key,
            value: f.value,
            headers: f.headers,
        };
        Ok(Bound::new(py, record)?.into_any())
    })?;
    records.map(|(records, _)| PyList::new(py, records)).transpose()
}

/// The records of the same batch as `batch_records` reads them, as the `ConsumerRecord`s (the
/// class `make`) kafka-python's fetcher makes of them without deserializers, for partition
/// `partition` of `topic` at `leader_epoch`; with the sum of their `size_in_bytes` (the
/// fetcher's bytes read). None where `batch_records` gives None.
#[pyfunction]
#[pyo3(signature = (buffer, pos, count, base_offset, first_timestamp, log_append_time, timestamp_type, topic, partition, leader_epoch, make))]
#[allow(clippy::too_many_arguments)]
pub fn consumer_records<'py>(
    py: Python<'py>,
    buffer: &Bound<'py, PyByteArray>,
    pos: usize,
    count: i64,
    base_offset: i64,
    first_timestamp: i64,
    log_append_time: Option<i64>,
    timestamp_type: i64,
    topic: &Bound<'py, PyString>,
    partition: &Bound<'py, PyAny>,
    leader_epoch: &Bound<'py, PyAny>,
    make: &Bound<'py, PyType>,
) -> PyResult<Option<(Bound<'py, PyList>, i64)>> {
    let header = Header { base_offset, first_timestamp, log_append_time };
    if !make.is_subclass_of::<PyTuple>()? {
        return Err(PyTypeError::new_err("make: a tuple's subclass, such as a namedtuple"));
    }
    let kind = timestamp_type.into_pyobject(py)?.into_any();
    let none = py.None().into_bound(py);
    let read = read_batch(py, buffer, pos, count, &header, |f| {
        let size_of = |b: &Option<Py<PyBytes>>| b.as_ref().map_or(-1, |b| b.bind(py).as_bytes().len() as i64);
        let fields = [
            topic.clone().into_any(),
            partition.clone(),
            leader_epoch.clone(),
            f.offset.into_pyobject(py)?.into_any(),
            f.timestamp.into_pyobject(py)?.into_any(),
            kind.clone(),
            f.key.as_ref().map_or_else(|| none.clone(), |k| k.bind(py).clone().into_any()),
            f.value.as_ref().map_or_else(|| none.clone(), |v| v.bind(py).clone().into_any()),
            f.headers.into_bound(py).into_any(),
            none.clone(),
            size_of(&f.key).into_pyobject(py)?.into_any(),
            size_of(&f.value).into_pyobject(py)?.into_any(),
            f.header_size.into_pyobject(py)?.into_any(),
        ];
        tuple_of(make, fields)
    })?;
    read.map(|(records, size)| Ok((PyList::new(py, records)?, size))).transpose()
}

/// An instance of `make`, a subclass of tuple such as a namedtuple, holding `fields`: what
/// `tuple.__new__(make, fields)` (a namedtuple's `_make`) makes, without a Python call a record.
fn tuple_of<'py, const N: usize>(make: &Bound<'py, PyType>, fields: [Bound<'py, PyAny>; N]) -> PyResult<Bound<'py, PyAny>> {
    let py = make.py();
    // SAFETY: `make` is a subclass of tuple (checked by the caller), so the generic allocation
    // tuple.__new__ uses makes a tuple of it with N empty slots (its ob_size), referenced only
    // here; each PyTuple_SetItem fills one slot, taking the reference `into_ptr` hands it. A
    // slot left empty by an error is one the tuple's deallocation skips.
    unsafe {
        let tuple = ffi::PyType_GenericAlloc(make.as_type_ptr(), N as ffi::Py_ssize_t);
        let tuple = Bound::from_owned_ptr_or_err(py, tuple)?;
        for (i, field) in fields.into_iter().enumerate() {
            if ffi::PyTuple_SetItem(tuple.as_ptr(), i as ffi::Py_ssize_t, field.into_ptr()) != 0 {
                return Err(PyErr::fetch(py));
            }
        }
        Ok(tuple)
    }
}

/// `each` of the `count` records of a batch, in order, with the sum of their `size_in_bytes`;
/// None where `batch_records` documents it.
fn read_batch<'py>(
    py: Python<'py>,
    buffer: &Bound<'py, PyByteArray>,
    pos: usize,
    count: i64,
    header: &Header,
    mut each: impl FnMut(Fields) -> PyResult<Bound<'py, PyAny>>,
) -> PyResult<Option<(Vec<Bound<'py, PyAny>>, i64)>> {
    let buf = buffer.to_vec();
    let mut pos = pos;
    let mut out = Vec::with_capacity(usize::try_from(count).unwrap_or(0));
    let mut size = 0i64;
    for _ in 0..count {
        let Some(fields) = read_record(py, &buf, &mut pos, header) else {
            return Ok(None);
        };
        size += fields.size_in_bytes;
        out.push(each(fields)?);
    }
    if pos != buf.len() {
        return Ok(None);
    }
    Ok(Some((out, size)))
}

fn read_record(py: Python<'_>, buf: &[u8], pos: &mut usize, header: &Header) -> Option<Fields> {
    let length = varint(buf, pos)?;
    let start = *pos;
    varint(buf, pos)?; // attributes, unused
    let ts_delta = varint(buf, pos)?;
    let timestamp = match header.log_append_time {
        Some(ts) => ts,
        None => header.first_timestamp.checked_add(ts_delta)?,
    };
    let offset = header.base_offset.checked_add(varint(buf, pos)?)?;
    let key_len = varint(buf, pos)?;
    let key = bytes_at(py, buf, pos, key_len).ok()?;
    let value_len = varint(buf, pos)?;
    let value = bytes_at(py, buf, pos, value_len).ok()?;
    let header_count = varint(buf, pos)?;
    if header_count < 0 {
        return None;
    }
    let headers = PyList::empty(py);
    let mut header_size = if header_count == 0 { -1 } else { 0 };
    for _ in 0..header_count {
        let key_len = usize::try_from(varint(buf, pos)?).ok()?;
        let end = pos.checked_add(key_len)?;
        let h_key = std::str::from_utf8(buf.get(*pos..end)?).ok()?;
        *pos = end;
        let h_key = PyString::new(py, h_key);
        let value_len = varint(buf, pos)?;
        let h_value = bytes_at(py, buf, pos, value_len).ok()?;
        header_size += i64::try_from(key_len).ok()? + value_len.max(0);
        headers.append((h_key, h_value)).ok()?;
    }
    if i64::try_from(*pos - start).ok()? != length {
        return None;
    }
    Some(Fields { size_in_bytes: length, offset, timestamp, key, value, headers: headers.unbind(), header_size })
}

/// A zigzag varint at `*pos`, as kafka-python's `decode_varint` reads it; None where it raises
/// or the value does not fit in 64 bits.
fn varint(buf: &[u8], pos: &mut usize) -> Option<i64> {
    let mut raw: u128 = 0;
    let mut shift = 0;
    loop {
        let b = *buf.get(*pos)?;
        *pos += 1;
        raw |= u128::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            let value = (raw >> 1) as i128 ^ -((raw & 1) as i128);
            return i64::try_from(value).ok();
        }
        shift += 7;
        if shift >= 64 {
            return None;
        }
    }
}

/// `len` bytes at `*pos` (None for a negative length, as kafka-python reads it), or Err where
/// they run past the buffer.
fn bytes_at<'py>(py: Python<'py>, buf: &[u8], pos: &mut usize, len: i64) -> Result<Option<Py<PyBytes>>, ()> {
    if len < 0 {
        return Ok(None);
    }
    let end = pos.checked_add(usize::try_from(len).map_err(|_| ())?).ok_or(())?;
    let slice = buf.get(*pos..end).ok_or(())?;
    *pos = end;
    Ok(Some(PyBytes::new(py, slice).unbind()))
}
