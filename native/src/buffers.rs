//! Buffers crossing the Python boundary without copies: Python buffers borrowed for a call,
//! and Rust vectors handed to Python (and on to Arrow) as read-only buffers.

use std::ffi::{c_int, c_void};
use std::ptr;

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::{PyBufferError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;

/// A contiguous byte buffer exported by a Python object (a `pyarrow.Buffer`, whose format is
/// signed bytes, a memoryview, bytes, a numpy array seen as bytes).
pub enum Borrowed {
    Unsigned(PyBuffer<u8>),
    Signed(PyBuffer<i8>),
}

impl Borrowed {
    pub fn new(obj: &Bound<'_, PyAny>) -> PyResult<Self> {
        let buf = match PyBuffer::<u8>::get(obj) {
            Ok(b) => Borrowed::Unsigned(b),
            Err(_) => Borrowed::Signed(PyBuffer::<i8>::get(obj)?),
        };
        let contiguous = match &buf {
            Borrowed::Unsigned(b) => b.is_c_contiguous(),
            Borrowed::Signed(b) => b.is_c_contiguous(),
        };
        if !contiguous {
            return Err(PyValueError::new_err("buffer must be contiguous"));
        }
        Ok(buf)
    }

    /// The bytes, valid while the GIL is held (the `Python` token ties the lifetime to it).
    pub fn bytes<'a>(&'a self, _py: Python<'a>) -> &'a [u8] {
        let (ptr, len) = match self {
            Borrowed::Unsigned(b) => (b.buf_ptr() as *const u8, b.len_bytes()),
            Borrowed::Signed(b) => (b.buf_ptr() as *const u8, b.len_bytes()),
        };
        if len == 0 {
            return &[];
        }
        // SAFETY: `PyBuffer` keeps the exporter alive and its memory pinned until dropped; the
        // buffer is contiguous and `len` bytes long (one-byte items, signed or not). The call
        // runs under the GIL without releasing it, so no Python code writes to the buffer while
        // the slice lives.
        unsafe { std::slice::from_raw_parts(ptr, len) }
    }
}

/// Bytes owned by Rust, exported read-only through the buffer protocol (`pa.py_buffer` wraps
/// them without a copy and keeps this object alive).
#[pyclass(frozen, module = "sparklog_native")]
pub struct OwnedBuffer {
    data: Vec<u8>,
}

impl OwnedBuffer {
    pub fn wrap(py: Python<'_>, data: Vec<u8>) -> PyResult<Bound<'_, OwnedBuffer>> {
        Bound::new(py, OwnedBuffer { data })
    }
}

#[pymethods]
impl OwnedBuffer {
    fn __len__(&self) -> usize {
        self.data.len()
    }

    /// # Safety
    /// Called by CPython with a valid `view` to fill, as the buffer protocol specifies.
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        if view.is_null() {
            return Err(PyBufferError::new_err("null view"));
        }
        if flags & ffi::PyBUF_WRITABLE == ffi::PyBUF_WRITABLE {
            return Err(PyBufferError::new_err("the buffer is read-only"));
        }
        let data = &slf.get().data;
        // SAFETY: `view` is valid (checked non-null; CPython owns it). The exported pointer
        // stays valid while `view.obj` holds a reference to this frozen object, whose vector
        // is never mutated or reallocated after construction.
        unsafe {
            (*view).buf = data.as_ptr() as *mut c_void;
            (*view).len = data.len() as isize;
            (*view).readonly = 1;
            (*view).itemsize = 1;
            (*view).format = if flags & ffi::PyBUF_FORMAT == ffi::PyBUF_FORMAT {
                c"B".as_ptr() as *mut _
            } else {
                ptr::null_mut()
            };
            (*view).ndim = 1;
            (*view).shape = if flags & ffi::PyBUF_ND == ffi::PyBUF_ND {
                &mut (*view).len
            } else {
                ptr::null_mut()
            };
            (*view).strides = if flags & ffi::PyBUF_STRIDES == ffi::PyBUF_STRIDES {
                &mut (*view).itemsize
            } else {
                ptr::null_mut()
            };
            (*view).suboffsets = ptr::null_mut();
            (*view).internal = ptr::null_mut();
            (*view).obj = slf.into_any().into_ptr();
        }
        Ok(())
    }

    /// # Safety
    /// Called by CPython when a view is released; nothing to free.
    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {}
}

/// Little-endian int64s from bytes (numpy's native order on the machines we build for).
pub fn i64s(b: &[u8]) -> Vec<i64> {
    b.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().unwrap())).collect()
}
