//! `CompactVec<T>`: a `Vec<T>` whose length and capacity are `u32`, so that its header is 16
//! bytes where a `Vec`'s is 24. A FiBA node holds three and a tree a few more, and a worker
//! holds a tree per key: at 100 entries per key the headers alone were 5 bytes per entry.
//!
//! The buffer is a `Vec`'s (its pointer, length and capacity, taken apart and put back
//! together): pushes and pops at the end are done here, every other change by the `Vec` itself
//! (`with`), so growth, moves and drops are `Vec`'s. Lengths and capacities above `u32::MAX`
//! panic; zero-sized `T` is refused at compile time (a `Vec` of them has capacity
//! `usize::MAX`).

use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::ops::{Deref, DerefMut, RangeBounds};
use std::ptr::NonNull;

/// A `Vec<T>` with `u32` length and capacity (see the module doc).
pub struct CompactVec<T> {
    ptr: NonNull<T>,
    len: u32,
    cap: u32,
    _owns: PhantomData<T>,
}

// SAFETY: it owns its buffer of `T`s as a `Vec<T>` does.
unsafe impl<T: Send> Send for CompactVec<T> {}
// SAFETY: shared access only reads the `T`s, as a `&Vec<T>`'s does.
unsafe impl<T: Sync> Sync for CompactVec<T> {}

impl<T> CompactVec<T> {
    const SIZED: () = assert!(std::mem::size_of::<T>() != 0, "zero-sized elements");

    /// An empty vector; allocates nothing.
    pub const fn new() -> Self {
        let () = Self::SIZED;
        CompactVec {
            ptr: NonNull::dangling(),
            len: 0,
            cap: 0,
            _owns: PhantomData,
        }
    }

    /// The `Vec` this is: the same buffer, nothing copied.
    pub fn into_vec(self) -> Vec<T> {
        let me = ManuallyDrop::new(self);
        // SAFETY: pointer, length and capacity are a `Vec<T>`'s (`From<Vec<T>>`), or a
        // dangling pointer with capacity 0 (`new`), which a `Vec` accepts.
        unsafe { Vec::from_raw_parts(me.ptr.as_ptr(), me.len as usize, me.cap as usize) }
    }

    /// Change it as a `Vec`. While `f` runs this is empty, so a panic in `f` drops the
    /// buffer once (the `Vec`'s drop) and leaves this empty.
    #[inline]
    pub fn with<R>(&mut self, f: impl FnOnce(&mut Vec<T>) -> R) -> R {
        let mut v = std::mem::take(self).into_vec();
        let out = f(&mut v);
        let back = Self::from(v);
        // SAFETY: `self` is the empty vector `take` left, which owns nothing to drop.
        unsafe { std::ptr::write(self, back) };
        out
    }

    #[inline]
    pub fn capacity(&self) -> usize {
        self.cap as usize
    }

    #[inline]
    pub fn push(&mut self, x: T) {
        if self.len == self.cap {
            self.grow_one();
        }
        // SAFETY: slot `len` is inside the buffer (`grow_one`) and holds no value.
        unsafe { self.ptr.as_ptr().add(self.len as usize).write(x) };
        self.len += 1;
    }

    /// Room for one more element as a full `Vec` grows (amortized doubling): out of line
    /// and without the element, so that `push` and `insert` inline small and keep it in
    /// registers.
    #[cold]
    #[inline(never)]
    fn grow_one(&mut self) {
        self.with(|v| v.reserve(1));
    }

    #[inline]
    pub fn pop(&mut self) -> Option<T> {
        if self.len == 0 {
            return None;
        }
        self.len -= 1;
        // SAFETY: slot `len` held the last value, now outside the length: read it out once.
        Some(unsafe { self.ptr.as_ptr().add(self.len as usize).read() })
    }

    #[inline]
    pub fn insert(&mut self, i: usize, x: T) {
        let len = self.len as usize;
        assert!(i <= len, "insertion index {i} > len {len}");
        if self.len == self.cap {
            self.grow_one();
        }
        // SAFETY: slots `i..len` hold values and slot `len` is free (`grow_one`): shift them up by one
        // (overlapping copy), then fill slot `i`.
        unsafe {
            let at = self.ptr.as_ptr().add(i);
            if i < len {
                std::ptr::copy(at, at.add(1), len - i);
            }
            at.write(x);
        }
        self.len += 1;
    }

    #[inline]
    pub fn remove(&mut self, i: usize) -> T {
        let len = self.len as usize;
        assert!(i < len, "removal index {i} >= len {len}");
        // SAFETY: slot `i` holds a value, read out once; slots `i + 1..len` shift down by one
        // (overlapping copy) and the length drops, so no value is held twice.
        unsafe {
            let at = self.ptr.as_ptr().add(i);
            let x = at.read();
            if i + 1 < len {
                std::ptr::copy(at.add(1), at, len - i - 1);
            }
            self.len -= 1;
            x
        }
    }

    #[inline]
    pub fn clear(&mut self) {
        let len = self.len as usize;
        self.len = 0;
        // SAFETY: the first `len` slots held values, now outside the length: dropped once
        // (a panicking drop leaks the rest, as `Vec::clear` may).
        unsafe {
            std::ptr::drop_in_place(std::ptr::slice_from_raw_parts_mut(self.ptr.as_ptr(), len));
        }
    }

    pub fn reserve_exact(&mut self, extra: usize) {
        self.with(|v| v.reserve_exact(extra));
    }

    pub fn shrink_to_fit(&mut self) {
        self.with(Vec::shrink_to_fit);
    }

    pub fn truncate(&mut self, len: usize) {
        self.with(|v| v.truncate(len));
    }

    /// Remove the elements of `range` (dropped).
    pub fn remove_range(&mut self, range: impl RangeBounds<usize>) {
        self.with(|v| {
            v.drain(range);
        });
    }

    /// Remove the elements of `range` and return them (a new `Vec` of their exact size).
    pub fn take_range(&mut self, range: impl RangeBounds<usize>) -> Vec<T> {
        self.with(|v| v.drain(range).collect())
    }

    /// Put `items` before the first element.
    pub fn prepend(&mut self, items: Vec<T>) {
        self.with(|v| {
            v.splice(0..0, items);
        });
    }

    pub fn extend(&mut self, items: impl IntoIterator<Item = T>) {
        self.with(|v| v.extend(items));
    }

    /// Move every element of `other` to the end, leaving `other` empty (its buffer kept).
    #[inline]
    pub fn append(&mut self, other: &mut CompactVec<T>) {
        let n = other.len as usize;
        if (self.cap - self.len) as usize >= n {
            // SAFETY: `other`'s values move to free slots `len..len + n` of this buffer (two
            // buffers, no overlap) and leave `other`'s length, so each is held once.
            unsafe {
                let end = self.ptr.as_ptr().add(self.len as usize);
                std::ptr::copy_nonoverlapping(other.ptr.as_ptr(), end, n);
            }
            other.len = 0;
            self.len += n as u32;
            return;
        }
        let mut taken = std::mem::take(other).into_vec();
        self.with(|v| v.append(&mut taken));
        *other = Self::from(taken);
    }

    #[inline]
    pub fn as_slice(&self) -> &[T] {
        // SAFETY: the first `len` slots hold values (a `Vec`'s buffer, or dangling and empty).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len as usize) }
    }

    #[inline]
    pub fn as_mut_slice(&mut self) -> &mut [T] {
        // SAFETY: as `as_slice`, borrowed uniquely.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len as usize) }
    }
}

impl<T> From<Vec<T>> for CompactVec<T> {
    fn from(v: Vec<T>) -> Self {
        let () = Self::SIZED;
        let len = u32::try_from(v.len()).expect("at most u32::MAX elements");
        let cap = u32::try_from(v.capacity()).expect("a capacity of at most u32::MAX");
        let mut v = ManuallyDrop::new(v);
        CompactVec {
            ptr: NonNull::new(v.as_mut_ptr()).expect("a Vec's pointer is never null"),
            len,
            cap,
            _owns: PhantomData,
        }
    }
}

impl<T> Default for CompactVec<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Drop for CompactVec<T> {
    fn drop(&mut self) {
        drop(std::mem::take(self).into_vec());
    }
}

impl<T> Deref for CompactVec<T> {
    type Target = [T];
    #[inline]
    fn deref(&self) -> &[T] {
        self.as_slice()
    }
}

impl<T> DerefMut for CompactVec<T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut [T] {
        self.as_mut_slice()
    }
}

impl<'a, T> IntoIterator for &'a CompactVec<T> {
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;
    fn into_iter(self) -> Self::IntoIter {
        self.as_slice().iter()
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for CompactVec<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.as_slice().fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::CompactVec;

    #[test]
    fn it_is_16_bytes_and_behaves_as_a_vec() {
        assert_eq!(std::mem::size_of::<CompactVec<String>>(), 16);
        let mut v: CompactVec<String> = CompactVec::new();
        let mut w: Vec<String> = Vec::new();
        for i in 0..40 {
            let s = i.to_string();
            match i % 7 {
                0..=2 => {
                    v.push(s.clone());
                    w.push(s);
                }
                3 => {
                    v.insert(i % (v.len() + 1), s.clone());
                    w.insert(i % (w.len() + 1), s);
                }
                4 => assert_eq!(v.pop(), w.pop()),
                5 => {
                    let taken = v.take_range(..v.len() / 3);
                    assert_eq!(taken, w.drain(..w.len() / 3).collect::<Vec<_>>());
                    v.prepend(taken.clone());
                    w.splice(0..0, taken);
                }
                _ => {
                    let mut other = CompactVec::from(vec![s.clone(), s.clone()]);
                    v.append(&mut other);
                    assert!(other.is_empty());
                    w.extend([s.clone(), s]);
                    v.remove_range(1..2);
                    w.drain(1..2);
                }
            }
            assert_eq!(&v[..], &w[..]);
        }
        v.truncate(3);
        v.shrink_to_fit();
        assert_eq!(v.capacity(), 3);
        assert_eq!(v.into_vec(), w[..3].to_vec());
    }

    #[test]
    fn a_panic_inside_leaves_it_empty_and_sound() {
        let mut v = CompactVec::from(vec![String::from("a")]);
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            v.with(|_| panic!("inside"));
        }));
        assert!(caught.is_err());
        assert!(v.is_empty());
        v.push(String::from("b"));
        assert_eq!(&v[..], ["b"]);
    }
}
