//! `Deadlines()`: the join's pending items (queries to settle, orphans, tombstones and dedup keys
//! to forget), handed out once the watermark passes their time, as `streameval.deadlines`
//! does: by time, then by arrival. One binary heap of plain (time, arrival) keys; the items are
//! Python objects it holds and hands back, never looks into.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use pyo3::prelude::*;
use pyo3::types::PyList;

struct Pending {
    when: f64,
    seq: u64,
    item: Py<PyAny>,
}

impl Pending {
    /// The heap's order, reversed (BinaryHeap pops its greatest): the earliest time first, then
    /// the earliest arrival. A NaN time sorts with -inf, as Python's buckets place it.
    fn cmp_key(&self) -> (f64, u64) {
        (
            if self.when.is_nan() {
                f64::NEG_INFINITY
            } else {
                self.when
            },
            self.seq,
        )
    }
}

impl PartialEq for Pending {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Pending {}

impl PartialOrd for Pending {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Pending {
    fn cmp(&self, other: &Self) -> Ordering {
        let (a, b) = (self.cmp_key(), other.cmp_key());
        b.0.total_cmp(&a.0).then(b.1.cmp(&a.1))
    }
}

#[pyclass(module = "streameval_native")]
pub struct Deadlines {
    heap: BinaryHeap<Pending>,
    seq: u64,
}

#[pymethods]
impl Deadlines {
    #[new]
    fn new() -> Self {
        Deadlines {
            heap: BinaryHeap::new(),
            seq: 0,
        }
    }

    fn __len__(&self) -> usize {
        self.heap.len()
    }

    /// Hold `item` until the watermark passes `when`.
    fn push(&mut self, when: f64, item: Py<PyAny>) {
        self.heap.push(Pending {
            when,
            seq: self.seq,
            item,
        });
        self.seq += 1;
    }

    /// The time of the earliest item (-inf for one at NaN, which sorts with -inf), inf with
    /// none: no watermark up to it makes any item due.
    fn earliest(&self) -> f64 {
        self.heap.peek().map_or(f64::INFINITY, |head| head.cmp_key().0)
    }

    /// Remove and return the items whose time is below `watermark`, earliest first (an item at
    /// +inf is never due; one at -inf is due at any watermark above it).
    fn pop_due<'py>(&mut self, py: Python<'py>, watermark: f64) -> PyResult<Bound<'py, PyList>> {
        let out = PyList::empty(py);
        while let Some(head) = self.heap.peek() {
            if head.cmp_key().0.partial_cmp(&watermark) != Some(Ordering::Less) {
                break; // not due (nothing is at a NaN watermark)
            }
            let head = self.heap.pop().expect("peeked");
            out.append(head.item)?;
        }
        Ok(out)
    }

    fn __traverse__(&self, visit: pyo3::PyVisit<'_>) -> Result<(), pyo3::PyTraverseError> {
        for pending in &self.heap {
            visit.call(&pending.item)?;
        }
        Ok(())
    }

    fn __clear__(&mut self) {
        self.heap.clear();
    }
}
