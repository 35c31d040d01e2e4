//! The `__getitem__` of the native sequence views (`Effects`, `FetchedRecords`): a Python
//! index or step-1 slice resolved against a view's length, as a list resolves it, with the
//! errors naming the items; `item_index` alone for a sequence indexed by int only
//! (`KeyedRecords`). O(1).

use pyo3::exceptions::{PyIndexError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PySlice;

/// What a `__getitem__` argument asks of a sequence of `len` items.
pub(crate) enum SequenceIndex {
    /// The item at this position (a negative index counted from the end, resolved).
    Item(usize),
    /// The items `start..stop` (empty when the slice's stop is before its start).
    Slice(usize, usize),
}

impl SequenceIndex {
    /// `index` (an int or a slice of step 1) against `len` items; `what` names an item in
    /// the errors: IndexError `"<what> index out of range"`, ValueError `"a slice of
    /// <what>s has step 1"`, TypeError for another kind of index.
    pub(crate) fn resolve(index: &Bound<'_, PyAny>, len: usize, what: &str) -> PyResult<Self> {
        if let Ok(slice) = index.downcast::<PySlice>() {
            let indices = slice.indices(len as isize)?;
            if indices.step != 1 {
                return Err(PyValueError::new_err(format!(
                    "a slice of {what}s has step 1"
                )));
            }
            let stop = indices.stop.max(indices.start);
            return Ok(SequenceIndex::Slice(indices.start as usize, stop as usize));
        }
        Ok(SequenceIndex::Item(item_index(
            index.extract()?,
            len,
            what,
        )?))
    }
}

/// The position of the item at Python index `i` of a sequence of `len` items (a negative
/// index counted from the end), or IndexError `"<what> index out of range"`.
pub(crate) fn item_index(i: isize, len: usize, what: &str) -> PyResult<usize> {
    let i = if i < 0 { i + len as isize } else { i };
    match usize::try_from(i) {
        Ok(i) if i < len => Ok(i),
        _ => Err(PyIndexError::new_err(format!("{what} index out of range"))),
    }
}
