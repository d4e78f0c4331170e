//! How busy a CUDA device is during a run, sampled through NVML (`libnvidia-ml.so.1`, which the
//! NVIDIA driver installs): a thread reads the device's utilisation (the fraction of the last
//! sample period in which a kernel ran) every 100 ms between [`Sampler::start`] and
//! [`Sampler::finish`], and the report shows the mean. NVML is opened at run time with `dlopen`,
//! so a machine without the driver runs as before and its report has no busy fraction.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// NVML's `nvmlUtilization_t`.
#[repr(C)]
#[derive(Default)]
struct Utilization {
    gpu: c_uint,
    memory: c_uint,
}

type Init = unsafe extern "C" fn() -> c_int;
type ByIndex = unsafe extern "C" fn(c_uint, *mut *mut c_void) -> c_int;
type ByUuid = unsafe extern "C" fn(*const c_char, *mut *mut c_void) -> c_int;
type Rates = unsafe extern "C" fn(*mut c_void, *mut Utilization) -> c_int;
type Shutdown = unsafe extern "C" fn() -> c_int;

/// The NVML library, initialised, with the functions the sampler calls.
struct Nvml {
    library: *mut c_void,
    rates: Rates,
    shutdown: Shutdown,
}

// SAFETY: NVML's functions are thread-safe (its documentation), and the handle is only used by
// the sampler's thread once moved there.
unsafe impl Send for Nvml {}

impl Nvml {
    /// Opens and initialises NVML; why not, when it cannot.
    fn open() -> Result<Nvml, String> {
        let name = CString::new("libnvidia-ml.so.1").map_err(|e| e.to_string())?;
        // SAFETY: dlopen with a valid C string; a null result is handled.
        let library = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if library.is_null() {
            return Err(
                "libnvidia-ml.so.1 (the NVIDIA driver's NVML) is not on this machine".into(),
            );
        }
        let found = (|| {
            // SAFETY: each symbol, when present, has the C signature NVML's header declares.
            unsafe {
                let init: Init = std::mem::transmute(symbol(library, "nvmlInit_v2")?);
                let rates: Rates =
                    std::mem::transmute(symbol(library, "nvmlDeviceGetUtilizationRates")?);
                let shutdown: Shutdown = std::mem::transmute(symbol(library, "nvmlShutdown")?);
                Ok((init, rates, shutdown))
            }
        })();
        let (init, rates, shutdown) = match found {
            Ok(f) => f,
            Err(e) => {
                // SAFETY: the library was opened above and nothing of it is kept.
                unsafe { libc::dlclose(library) };
                return Err(e);
            }
        };
        // SAFETY: nvmlInit_v2 takes no argument.
        let status = unsafe { init() };
        if status != 0 {
            // SAFETY: as above.
            unsafe { libc::dlclose(library) };
            return Err(format!("nvmlInit_v2 failed (NVML status {status})"));
        }
        Ok(Nvml {
            library,
            rates,
            shutdown,
        })
    }

    /// The NVML device of CUDA device `index`: under `CUDA_VISIBLE_DEVICES` the entry at that
    /// position (an index or a `GPU-` UUID), otherwise NVML's device of the same index.
    fn device(&self, index: usize) -> Result<*mut c_void, String> {
        let visible = std::env::var("CUDA_VISIBLE_DEVICES").ok();
        let entry = visible
            .as_deref()
            .and_then(|v| v.split(',').nth(index).map(str::trim).map(String::from));
        let mut device = std::ptr::null_mut();
        let status = match entry {
            Some(e) if e.starts_with("GPU-") || e.starts_with("MIG-") => {
                let uuid = CString::new(e).map_err(|e| e.to_string())?;
                // SAFETY: the symbol has this signature; the pointers live for the call.
                unsafe {
                    let by: ByUuid =
                        std::mem::transmute(symbol(self.library, "nvmlDeviceGetHandleByUUID")?);
                    by(uuid.as_ptr(), &mut device)
                }
            }
            other => {
                let n = match other {
                    Some(e) => e
                        .parse::<c_uint>()
                        .map_err(|_| format!("CUDA_VISIBLE_DEVICES entry `{e}` is not an index"))?,
                    None => c_uint::try_from(index).map_err(|e| e.to_string())?,
                };
                // SAFETY: as above.
                unsafe {
                    let by: ByIndex =
                        std::mem::transmute(symbol(self.library, "nvmlDeviceGetHandleByIndex_v2")?);
                    by(n, &mut device)
                }
            }
        };
        if status != 0 || device.is_null() {
            return Err(format!(
                "NVML has no device for cuda:{index} (NVML status {status})"
            ));
        }
        Ok(device)
    }
}

impl Drop for Nvml {
    fn drop(&mut self) {
        // SAFETY: NVML was initialised in `open`; the library stays open until this point.
        unsafe {
            (self.shutdown)();
            libc::dlclose(self.library);
        }
    }
}

/// The address of `name` in `library`.
fn symbol(library: *mut c_void, name: &str) -> Result<*mut c_void, String> {
    let c = CString::new(name).map_err(|e| e.to_string())?;
    // SAFETY: dlsym with an open library and a valid C string; null is handled.
    let p = unsafe { libc::dlsym(library, c.as_ptr()) };
    if p.is_null() {
        // SAFETY: dlerror returns null or a C string valid until the next dl call.
        let why = unsafe {
            let e = libc::dlerror();
            if e.is_null() {
                String::new()
            } else {
                CStr::from_ptr(e).to_string_lossy().into_owned()
            }
        };
        return Err(format!("NVML has no `{name}` {why}").trim_end().to_string());
    }
    Ok(p)
}

/// The device's busy fraction over a run's steady state.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Busy {
    /// The mean of the samples, from 0 to 1.
    pub fraction: f64,
    /// The samples taken.
    pub samples: u64,
}

/// A thread sampling one device's utilisation until it is finished.
pub struct Sampler {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<(u64, u64)>,
}

impl Sampler {
    /// The sample period.
    const EVERY: Duration = Duration::from_millis(100);

    /// Starts sampling CUDA device `index`; why not, when NVML or the device cannot be read.
    pub fn start(index: usize) -> Result<Sampler, String> {
        let nvml = Nvml::open()?;
        let device = nvml.device(index)? as usize;
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("gpu busy".into())
            .spawn(move || {
                let (mut sum, mut n) = (0u64, 0u64);
                while !stopped.load(Ordering::Relaxed) {
                    std::thread::sleep(Self::EVERY);
                    let mut u = Utilization::default();
                    // SAFETY: the device handle came from this NVML, which lives here.
                    if unsafe { (nvml.rates)(device as *mut c_void, &mut u) } == 0 {
                        sum += u64::from(u.gpu.min(100));
                        n += 1;
                    }
                }
                drop(nvml);
                (sum, n)
            })
            .map_err(|e| e.to_string())?;
        Ok(Sampler { stop, thread })
    }

    /// Stops sampling; the mean busy fraction, when a sample was taken.
    pub fn finish(self) -> Option<Busy> {
        self.stop.store(true, Ordering::Relaxed);
        let (sum, n) = self.thread.join().ok()?;
        (n > 0).then(|| Busy {
            fraction: sum as f64 / (100.0 * n as f64),
            samples: n,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_nvml_or_its_device_the_sampler_says_why() {
        // This test's machines have no NVIDIA driver; where one has, the device index past
        // any real device is refused by name.
        match Sampler::start(4096) {
            Ok(s) => panic!("sampled a device that cannot exist: {:?}", s.finish()),
            Err(why) => assert!(
                why.contains("libnvidia-ml.so.1") || why.contains("cuda:4096"),
                "{why}"
            ),
        }
    }
}
