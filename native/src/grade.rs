//! `Grader(min_grade, ignore_unshown, ap_ks, dcg_ks, exp_gain, no_grades, fallback)`:
//! `Scorer.add_grade(state, item, grade)` (`streameval.scoring.query`), the daemon's scoring of
//! one attributed event, applied to the same `QueryScore` attributes with the same
//! floating-point operations in the same order, so the state is Python's to the bit (the AP
//! numerators as `ap.add_hit` grows them, the DCGs with `2^g - 1` and `1 / log2(rank + 1)` from
//! the same C library as Python's). Everything it reads is checked before it changes anything: a
//! state it does not read (a shown list held as a tuple, a number that is not a float, a gain
//! past the floats) is handed, unchanged, to `fallback`, the Python method.

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};

use crate::score::rank_in;

#[pyclass(frozen)]
pub struct Grader {
    min_grade: f64,
    ignore_unshown: bool,
    ap_ks: Vec<usize>,
    dcg_ks: Vec<usize>,
    exp_gain: bool,
    /// the shared empty dict of a state no event has changed (`NO_GRADES`)
    no_grades: Py<PyDict>,
    fallback: Py<PyAny>,
}

/// What of a state the scoring of one event changes, read and checked, or None: Python decides.
type Read<T> = Option<T>;

/// A list or tuple of exact floats, as its values.
fn floats(seq: &Bound<'_, PyAny>) -> Read<Vec<f64>> {
    let mut out = Vec::new();
    for x in seq_items(seq)? {
        out.push(x.cast_exact::<PyFloat>().ok()?.value());
    }
    Some(out)
}

/// A list or tuple of exact ints that are ranks (>= 1), as its values.
fn ranks(seq: &Bound<'_, PyAny>) -> Read<Vec<usize>> {
    let mut out = Vec::new();
    for x in seq_items(seq)? {
        out.push(
            x.cast_exact::<PyInt>()
                .ok()?
                .extract::<usize>()
                .ok()
                .filter(|&r| r >= 1)?,
        );
    }
    Some(out)
}

fn seq_items<'py>(seq: &Bound<'py, PyAny>) -> Read<Vec<Bound<'py, PyAny>>> {
    if let Ok(list) = seq.cast_exact::<PyList>() {
        return Some(list.iter().collect());
    }
    Some(seq.cast_exact::<PyTuple>().ok()?.iter().collect())
}

/// `bisect.bisect_left`: where `x` goes before every equal value, probing the same places as
/// Python's (not `partition_point`, which probes others: the same answer only on sorted values).
fn bisect_left<T: PartialOrd>(values: &[T], x: &T) -> usize {
    let (mut lo, mut hi) = (0, values.len());
    while lo < hi {
        let mid = (lo + hi) / 2;
        if values[mid] < *x {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

/// `bisect.bisect_right`: where `x` goes after every equal value (`bisect.insort`).
fn bisect_right<T: PartialOrd>(values: &[T], x: &T) -> usize {
    let (mut lo, mut hi) = (0, values.len());
    while lo < hi {
        let mid = (lo + hi) / 2;
        if *x < values[mid] {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    lo
}

/// `_own`: the state's list of these values (`values`, its attribute `name` as read), a copy of
/// a shared tuple set on the state first.
fn own<'py>(
    state: &Bound<'py, PyAny>,
    name: &Bound<'py, PyString>,
    values: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyList>> {
    if let Ok(list) = values.cast_exact::<PyList>() {
        return Ok(list.clone());
    }
    let list = PyList::new(state.py(), values.cast_exact::<PyTuple>()?.iter())?;
    state.setattr(name, &list)?;
    Ok(list)
}

/// The change one relevant grade makes, read and checked before anything is changed: each
/// attribute it changes as read, with what goes into it.
struct Plan<'py> {
    rank: Option<usize>,
    /// the relevant grades; where the old grade leaves them and where the new one goes
    ideal: Bound<'py, PyAny>,
    ideal_out: Option<usize>,
    ideal_in: usize,
    /// for a shown item that becomes relevant: the hits and where its rank goes in them
    hits: Option<(Bound<'py, PyAny>, usize)>,
    /// ... and the AP numerators with each one's new value
    ap_num: Option<(Bound<'py, PyAny>, Vec<f64>)>,
    /// for a shown item: the DCGs with each one's new value (those past the rank unchanged)
    dcg: Option<(Bound<'py, PyAny>, Vec<f64>)>,
}

impl Grader {
    /// `ndcg.gain`: None past the floats, where Python's `2.0 ** g` raises.
    fn gain(&self, grade: f64) -> Option<f64> {
        if !self.exp_gain {
            return Some(grade);
        }
        let power = 2.0f64.powf(grade);
        power.is_finite().then_some(power - 1.0)
    }

    /// What applying `grade` to a state changes beyond its grade dict, when `grade` is relevant
    /// and `old` (the item's grade before, if any) lower: Some(None) for an item not shown
    /// that does not count (`unshown_items = "ignore"`); None where Python decides.
    fn plan<'py>(
        &self,
        state: &Bound<'py, PyAny>,
        item: &str,
        old: Option<f64>,
        grade: f64,
    ) -> PyResult<Read<Option<Plan<'py>>>> {
        let py = state.py();
        let items = state.getattr(intern!(py, "items"))?;
        let Some(shown) = items
            .cast_exact::<PyString>()
            .ok()
            .and_then(|s| s.to_str().ok())
        else {
            return Ok(None);
        };
        let Ok(rank) = rank_in(shown, item) else {
            return Ok(None);
        };
        if rank.is_none() && self.ignore_unshown {
            return Ok(Some(None));
        }
        let was = old.filter(|&o| o >= self.min_grade);
        let ideal_obj = state.getattr(intern!(py, "ideal"))?;
        let Some(mut ideal) = floats(&ideal_obj) else {
            return Ok(None);
        };
        let mut ideal_out = None;
        if let Some(o) = was {
            let at = bisect_left(&ideal, &o);
            if at == ideal.len() {
                return Ok(None); // not there: Python's del raises
            }
            ideal.remove(at);
            ideal_out = Some(at);
        }
        let mut plan = Plan {
            rank,
            ideal: ideal_obj,
            ideal_out,
            ideal_in: bisect_right(&ideal, &grade),
            hits: None,
            ap_num: None,
            dcg: None,
        };
        let Some(rank) = rank else {
            return Ok(Some(Some(plan)));
        };
        if was.is_none() {
            let hits_obj = state.getattr(intern!(py, "hits"))?;
            let Some(mut hits) = ranks(&hits_obj) else {
                return Ok(None);
            };
            let at = bisect_left(&hits, &rank);
            hits.insert(at, rank);
            plan.hits = Some((hits_obj, at));
            if !self.ap_ks.is_empty() {
                let ap_obj = state.getattr(intern!(py, "ap_num"))?;
                let Some(ap_num) = floats(&ap_obj).filter(|a| a.len() == self.ap_ks.len()) else {
                    return Ok(None);
                };
                let grown = ap_num
                    .iter()
                    .zip(&self.ap_ks)
                    .map(|(num, &k)| num + add_hit(&hits, at, rank, k))
                    .collect();
                plan.ap_num = Some((ap_obj, grown));
            }
        }
        if !self.dcg_ks.is_empty() {
            let dcg_obj = state.getattr(intern!(py, "dcg"))?;
            let Some(dcg) = floats(&dcg_obj).filter(|d| d.len() == self.dcg_ks.len()) else {
                return Ok(None);
            };
            let (Some(new), Some(before)) =
                (self.gain(grade), was.map_or(Some(0.0), |o| self.gain(o)))
            else {
                return Ok(None);
            };
            let delta = new - before;
            let discount = 1.0 / ((rank + 1) as f64).log2();
            let grown = dcg
                .iter()
                .zip(&self.dcg_ks)
                .map(|(&d, &k)| if rank <= k { d + delta * discount } else { d })
                .collect();
            plan.dcg = Some((dcg_obj, grown));
        }
        Ok(Some(Some(plan)))
    }

    /// The change `plan` describes, made to the state's attributes as Python makes it.
    fn apply(
        &self,
        state: &Bound<'_, PyAny>,
        plan: &Plan<'_>,
        grade: &Bound<'_, PyFloat>,
    ) -> PyResult<()> {
        let py = state.py();
        let ideal = own(state, intern!(py, "ideal"), &plan.ideal)?;
        if let Some(at) = plan.ideal_out {
            ideal.del_item(at)?;
        }
        ideal.insert(plan.ideal_in, grade)?;
        let Some(rank) = plan.rank else {
            return Ok(());
        };
        if let Some((hits, at)) = &plan.hits {
            own(state, intern!(py, "hits"), hits)?.insert(*at, rank)?;
        }
        if let Some((ap_num, grown)) = &plan.ap_num {
            let ap_num = own(state, intern!(py, "ap_num"), ap_num)?;
            for (i, &value) in grown.iter().enumerate() {
                ap_num.set_item(i, value)?;
            }
        }
        if let Some((dcg, grown)) = &plan.dcg {
            let dcg = own(state, intern!(py, "dcg"), dcg)?;
            for ((i, &value), &k) in grown.iter().enumerate().zip(&self.dcg_ks) {
                if rank <= k {
                    dcg.set_item(i, value)?;
                }
            }
        }
        Ok(())
    }
}

/// `ap.add_hit`: the change of AP@k's numerator when a hit at `rank` is inserted at
/// `hits[position]` (`hits` holding it already).
fn add_hit(hits: &[usize], position: usize, rank: usize, k: usize) -> f64 {
    if rank > k {
        return 0.0;
    }
    let mut delta = (position + 1) as f64 / rank as f64;
    for &later in &hits[position + 1..] {
        if later > k {
            break;
        }
        delta += 1.0 / later as f64;
    }
    delta
}

#[pymethods]
impl Grader {
    #[new]
    fn new(
        min_grade: f64,
        ignore_unshown: bool,
        ap_ks: Vec<usize>,
        dcg_ks: Vec<usize>,
        exp_gain: bool,
        no_grades: Py<PyDict>,
        fallback: Py<PyAny>,
    ) -> Self {
        Grader {
            min_grade,
            ignore_unshown,
            ap_ks,
            dcg_ks,
            exp_gain,
            no_grades,
            fallback,
        }
    }

    /// Apply one attributed event of `grade` on `item`; True when any metric changed.
    fn add_grade(
        &self,
        state: &Bound<'_, PyAny>,
        item: &Bound<'_, PyAny>,
        grade: &Bound<'_, PyAny>,
    ) -> PyResult<bool> {
        match self.add(state, item, grade)? {
            Some(changed) => Ok(changed),
            None => self
                .fallback
                .bind(state.py())
                .call1((state, item, grade))?
                .extract(),
        }
    }
}

impl Grader {
    fn add(
        &self,
        state: &Bound<'_, PyAny>,
        item: &Bound<'_, PyAny>,
        grade_obj: &Bound<'_, PyAny>,
    ) -> PyResult<Read<bool>> {
        let py = state.py();
        let (Ok(key), Ok(grade_f)) = (
            item.cast_exact::<PyString>(),
            grade_obj.cast_exact::<PyFloat>(),
        ) else {
            return Ok(None);
        };
        let Ok(item_str) = key.to_str() else {
            return Ok(None);
        };
        let grades_obj = state.getattr(intern!(py, "grade"))?;
        let Ok(grades) = grades_obj.cast_exact::<PyDict>() else {
            return Ok(None);
        };
        let grade = grade_f.value();
        let old = match grades.get_item(key)? {
            None => None,
            Some(o) => match o.cast_exact::<PyFloat>() {
                Ok(o) => Some(o.value()),
                Err(_) => return Ok(None),
            },
        };
        if old.is_some_and(|o| grade <= o) {
            return Ok(Some(false));
        }
        // everything read and checked before the first change
        let plan = if grade < self.min_grade {
            None // not relevant: only the grade dict changes
        } else {
            match self.plan(state, item_str, old, grade)? {
                Some(plan) => plan,
                None => return Ok(None),
            }
        };
        let grades = if grades.is(self.no_grades.bind(py)) {
            let own = PyDict::new(py);
            state.setattr(intern!(py, "grade"), &own)?;
            own
        } else {
            grades.clone()
        };
        grades.set_item(key, grade_f)?;
        let Some(plan) = plan else {
            return Ok(Some(false));
        };
        self.apply(state, &plan, grade_f)?;
        Ok(Some(true))
    }
}
