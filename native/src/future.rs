//! The future `send()` returns, natively (`client/record_future.py` is the reference).
//!
//! Why native: a producer keeps one future per record until its batch is acknowledged, and a
//! Python object kept that long is scanned by every garbage collection; at a million records
//! a second the collector costs more than the send. This class holds no reference cycles and
//! is not tracked by the collector. State changes happen under the GIL without calling into
//! Python in between, so each is atomic; waiting goes through the producer's `Waiters`
//! condition (Python), which `resolve_all` notifies once per batch.

use pyo3::exceptions::PyTimeoutError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

#[pyclass(module = "sparklog_native")]
pub struct RecordFuture {
    waiters: Py<PyAny>,
    metadata: Option<Py<PyAny>>,
    error: Option<Py<PyAny>>,
    done: bool,
    callbacks: Vec<Py<PyAny>>,
    on_delivery: Option<Py<PyAny>>,
}

/// What to run once a future is resolved: its done callbacks, then `on_delivery`.
type Pending = (Py<RecordFuture>, Vec<Py<PyAny>>, Option<Py<PyAny>>);

fn log_error(py: Python<'_>, message: &str, err: PyErr) {
    let logged = (|| -> PyResult<()> {
        let logger = py
            .import("logging")?
            .call_method1("getLogger", ("sparklog.client.record_future",))?;
        let kwargs = PyDict::new(py);
        kwargs.set_item("exc_info", err.value(py))?;
        logger.call_method("error", (message,), Some(&kwargs))?;
        Ok(())
    })();
    if let Err(e) = logged {
        e.write_unraisable(py, None);
    }
}

/// Run a resolved future's callbacks; their errors are logged, never raised.
fn run_pending(py: Python<'_>, (future, callbacks, on_delivery): Pending) {
    for fn_ in callbacks {
        if let Err(e) = fn_.call1(py, (future.clone_ref(py),)) {
            log_error(py, "a done callback of a record future raised", e);
        }
    }
    if let Some(cb) = on_delivery {
        let (metadata, error) = {
            let f = future.borrow(py);
            (f.metadata.as_ref().map(|m| m.clone_ref(py)), f.error.as_ref().map(|e| e.clone_ref(py)))
        };
        if let Err(e) = cb.call1(py, (metadata, error)) {
            log_error(py, "on_delivery callback raised", e);
        }
    }
}

/// Wake the threads waiting in `Waiters.wait`, if any.
fn notify(py: Python<'_>, waiters: &Py<PyAny>) -> PyResult<()> {
    let count: i64 = waiters.getattr(py, "count")?.extract(py)?;
    if count > 0 {
        waiters.call_method0(py, "notify_all")?;
    }
    Ok(())
}

impl RecordFuture {
    /// Set the outcome unless already done; what to run afterwards.
    fn settle(
        slf: &Bound<'_, RecordFuture>,
        metadata: Option<Py<PyAny>>,
        error: Option<Py<PyAny>>,
    ) -> Option<Pending> {
        let mut f = slf.borrow_mut();
        if f.done {
            return None;
        }
        f.metadata = metadata;
        f.error = error;
        f.done = true;
        let callbacks = std::mem::take(&mut f.callbacks);
        let on_delivery = f.on_delivery.take();
        Some((slf.clone().unbind(), callbacks, on_delivery))
    }

    fn wait(slf: &Bound<'_, RecordFuture>, timeout: Option<f64>) -> PyResult<()> {
        if slf.borrow().done {
            return Ok(());
        }
        let py = slf.py();
        let waiters = slf.borrow().waiters.clone_ref(py);
        let done: bool = waiters.call_method1(py, "wait", (slf, timeout))?.extract(py)?;
        if !done {
            return Err(PyTimeoutError::new_err(format!(
                "the record was not acknowledged within {} s",
                timeout.unwrap_or(f64::INFINITY)
            )));
        }
        Ok(())
    }
}

#[pymethods]
impl RecordFuture {
    #[new]
    #[pyo3(signature = (waiters, on_delivery = None))]
    fn new(waiters: Py<PyAny>, on_delivery: Option<Py<PyAny>>) -> Self {
        RecordFuture { waiters, metadata: None, error: None, done: false, callbacks: Vec::new(), on_delivery }
    }

    /// Resolve with (metadata, error); later calls change nothing.
    #[pyo3(signature = (metadata, error))]
    fn __call__(
        slf: &Bound<'_, Self>,
        metadata: Option<Py<PyAny>>,
        error: Option<Py<PyAny>>,
    ) -> PyResult<()> {
        let py = slf.py();
        let Some(pending) = Self::settle(slf, metadata, error) else {
            return Ok(());
        };
        notify(py, &slf.borrow().waiters)?;
        run_pending(py, pending);
        Ok(())
    }

    fn done(&self) -> bool {
        self.done
    }

    fn cancelled(&self) -> bool {
        false
    }

    fn running(&self) -> bool {
        !self.done
    }

    /// Records already handed to the producer cannot be cancelled (as in Kafka).
    fn cancel(&self) -> bool {
        false
    }

    /// The record's metadata, waiting up to `timeout` seconds; raises the send's error.
    #[pyo3(signature = (timeout = None))]
    fn result(slf: &Bound<'_, Self>, timeout: Option<f64>) -> PyResult<Py<PyAny>> {
        Self::wait(slf, timeout)?;
        let py = slf.py();
        let f = slf.borrow();
        if let Some(e) = &f.error {
            return Err(PyErr::from_value(e.bind(py).clone()));
        }
        Ok(f.metadata.as_ref().map_or_else(|| py.None(), |m| m.clone_ref(py)))
    }

    #[pyo3(signature = (timeout = None))]
    fn exception(slf: &Bound<'_, Self>, timeout: Option<f64>) -> PyResult<Option<Py<PyAny>>> {
        Self::wait(slf, timeout)?;
        let py = slf.py();
        Ok(slf.borrow().error.as_ref().map(|e| e.clone_ref(py)))
    }

    /// Call `fn(future)` once resolved (at once when it already is).
    fn add_done_callback(slf: &Bound<'_, Self>, r#fn: Py<PyAny>) {
        let py = slf.py();
        {
            let mut f = slf.borrow_mut();
            if !f.done {
                f.callbacks.push(r#fn);
                return;
            }
        }
        run_pending(py, (slf.clone().unbind(), vec![r#fn], None));
    }

    fn __repr__(&self) -> &'static str {
        match (self.done, self.error.is_some()) {
            (false, _) => "<RecordFuture pending>",
            (true, true) => "<RecordFuture failed>",
            (true, false) => "<RecordFuture done>",
        }
    }
}

/// Resolve a batch's futures with their metadata in one pass, notify waiters once, then run
/// callbacks. Entries that are not native futures (other thunks) are called as
/// `thunk(metadata, None)` in order.
#[pyfunction]
pub fn resolve_all(py: Python<'_>, futures: &Bound<'_, PyList>, metadatas: &Bound<'_, PyList>) -> PyResult<()> {
    if futures.len() != metadatas.len() {
        return Err(pyo3::exceptions::PyValueError::new_err("one metadata per future"));
    }
    let mut pending: Vec<Pending> = Vec::new();
    let mut waiters: Option<Py<PyAny>> = None;
    for (item, metadata) in futures.iter().zip(metadatas.iter()) {
        match item.cast::<RecordFuture>() {
            Ok(future) => {
                if waiters.is_none() {
                    waiters = Some(future.borrow().waiters.clone_ref(py));
                }
                if let Some(p) = RecordFuture::settle(future, Some(metadata.unbind()), None) {
                    if !p.1.is_empty() || p.2.is_some() {
                        pending.push(p);
                    }
                }
            }
            Err(_) => {
                item.call1((metadata, py.None()))?;
            }
        }
    }
    if let Some(w) = waiters {
        notify(py, &w)?;
    }
    for p in pending {
        run_pending(py, p);
    }
    Ok(())
}
