//! A safe binding to c10d through the shim in `shim/c10d.cpp`: the TCPStore that ranks meet at,
//! a process group (Gloo, or NCCL on CUDA), PyTorch's Reducer, which all-reduces gradients
//! in buckets while backward still runs (the units of fully sharded data parallel over a group
//! are in [`super::unit`]). Every C++ failure comes back as a [`CommError`] carrying c10d's
//! message; nothing here panics or aborts.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::time::Duration;

use tch::Tensor;

mod ffi {
    use std::ffi::{c_char, c_int, c_void};
    extern "C" {
        pub fn kiln_c10d_last_error() -> *const c_char;
        pub fn kiln_c10d_has_nccl() -> c_int;
        pub fn kiln_c10d_free_bytes(p: *mut u8);
        pub fn kiln_store_new(
            host: *const c_char,
            port: u16,
            is_server: c_int,
            world: i64,
            timeout_ms: i64,
            listen_fd: c_int,
        ) -> *mut c_void;
        pub fn kiln_store_set(s: *mut c_void, key: *const c_char, v: *const u8, n: usize) -> c_int;
        pub fn kiln_store_get(
            s: *mut c_void,
            key: *const c_char,
            v: *mut *mut u8,
            n: *mut usize,
        ) -> c_int;
        pub fn kiln_store_check(
            s: *mut c_void,
            keys: *const *const c_char,
            n: usize,
            all: *mut c_int,
        ) -> c_int;
        pub fn kiln_store_free(s: *mut c_void);
        pub fn kiln_group_new(
            s: *mut c_void,
            name: *const c_char,
            rank: c_int,
            world: c_int,
            backend: c_int,
            device: c_int,
            iface: *const c_char,
            host: *const c_char,
            timeout_ms: i64,
        ) -> *mut c_void;
        pub fn kiln_group_allreduce(g: *mut c_void, t: *mut c_void) -> c_int;
        pub fn kiln_group_broadcast(g: *mut c_void, t: *mut c_void, root: c_int) -> c_int;
        pub fn kiln_group_allgather(g: *mut c_void, out: *mut c_void, input: *mut c_void) -> c_int;
        pub fn kiln_group_free(g: *mut c_void);
        pub fn kiln_reducer_new(
            g: *mut c_void,
            params: *const *mut c_void,
            n: usize,
            cap_bytes: i64,
            stats: c_int,
        ) -> *mut c_void;
        pub fn kiln_reducer_stats(r: *mut c_void, out: *mut i64) -> c_int;
        pub fn kiln_reducer_prepare_forward(r: *mut c_void) -> c_int;
        pub fn kiln_reducer_prepare_backward(r: *mut c_void) -> c_int;
        pub fn kiln_reducer_free(r: *mut c_void);
    }
}

/// A failure inside c10d, with its message (a Gloo I/O error, a timeout, a store that cannot be
/// reached, parameters that differ between ranks).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommError(pub String);

impl std::fmt::Display for CommError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The shim's message for the call that just failed on this thread.
fn last_error() -> CommError {
    failure(ffi::kiln_c10d_last_error)
}

fn status(code: c_int) -> Result<(), CommError> {
    checked(code, ffi::kiln_c10d_last_error)
}

/// A shim's message for the call that just failed on this thread, which `message` returns (each
/// shim keeps its own).
pub(super) fn failure(message: unsafe extern "C" fn() -> *const c_char) -> CommError {
    // SAFETY: the shims return a pointer to a thread-local NUL-terminated string.
    let text = unsafe { CStr::from_ptr(message()) };
    CommError(text.to_string_lossy().trim().to_string())
}

/// A shim's status as a result, with its message on failure.
pub(super) fn checked(
    code: c_int,
    message: unsafe extern "C" fn() -> *const c_char,
) -> Result<(), CommError> {
    if code == 0 {
        Ok(())
    } else {
        Err(failure(message))
    }
}

fn text(s: &str) -> Result<CString, CommError> {
    CString::new(s).map_err(|_| CommError(format!("`{s}` holds a NUL byte")))
}

fn millis(d: Duration) -> i64 {
    d.as_millis().min(i64::MAX as u128) as i64
}

/// Whether this build can make NCCL process groups (a CUDA libtorch and NCCL's headers).
pub fn has_nccl() -> bool {
    // SAFETY: a pure query.
    unsafe { ffi::kiln_c10d_has_nccl() != 0 }
}

/// The collective backend of a process group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// Gloo, over TCP, on CPU tensors.
    Gloo,
    /// NCCL, on CUDA tensors of this device.
    Nccl {
        /// The CUDA device of this rank.
        device: usize,
    },
}

/// c10d's TCPStore: the key-value store ranks meet at.
pub struct Store(*mut c_void);

// SAFETY: a TCPStore is used from one thread at a time (it is owned, not shared), and c10d's
// store is safe to move between threads.
unsafe impl Send for Store {}

impl Store {
    /// Serves (`is_server`) or joins the store at `addr:port`. The server listens on `addr`
    /// alone (the first of its addresses that this machine has), never on every interface: the
    /// store has no authentication, so whoever can reach it can join or upset the run. The
    /// server never waits for the others; a client retries connecting until `timeout`, which
    /// also bounds every `get`.
    pub fn connect(
        addr: &str,
        port: u16,
        is_server: bool,
        world: usize,
        timeout: Duration,
    ) -> Result<Store, CommError> {
        let host = text(addr)?;
        let listen_fd = if is_server {
            let listener = std::net::TcpListener::bind((addr, port))
                .map_err(|e| {
                    CommError(format!(
                        "the store cannot listen on {addr}:{port}, which must be an address of this machine: {e}"
                    ))
                })?;
            // The store takes the socket over and closes it when it is dropped.
            std::os::fd::IntoRawFd::into_raw_fd(listener)
        } else {
            -1
        };
        // SAFETY: `host` outlives the call; the store owns `listen_fd` from here on.
        let p = unsafe {
            ffi::kiln_store_new(
                host.as_ptr(),
                port,
                c_int::from(is_server),
                world as i64,
                millis(timeout),
                listen_fd,
            )
        };
        if p.is_null() {
            Err(last_error())
        } else {
            Ok(Store(p))
        }
    }

    /// Sets `key` to `value`.
    pub fn set(&self, key: &str, value: &[u8]) -> Result<(), CommError> {
        let k = text(key)?;
        // SAFETY: the handle is live; `k` and `value` outlive the call.
        status(unsafe { ffi::kiln_store_set(self.0, k.as_ptr(), value.as_ptr(), value.len()) })
    }

    /// The value of `key`, waiting for it to be set up to the store's timeout.
    pub fn get(&self, key: &str) -> Result<Vec<u8>, CommError> {
        let k = text(key)?;
        let mut v: *mut u8 = std::ptr::null_mut();
        let mut n = 0usize;
        // SAFETY: the handle is live; on success the shim hands over a malloc'd buffer of `n`
        // bytes, which is copied and freed here.
        unsafe {
            status(ffi::kiln_store_get(self.0, k.as_ptr(), &mut v, &mut n))?;
            let out = std::slice::from_raw_parts(v, n).to_vec();
            ffi::kiln_c10d_free_bytes(v);
            Ok(out)
        }
    }

    /// Whether every key is set, without waiting.
    pub fn check(&self, keys: &[&str]) -> Result<bool, CommError> {
        let owned: Vec<CString> = keys.iter().map(|k| text(k)).collect::<Result<_, _>>()?;
        let ptrs: Vec<*const c_char> = owned.iter().map(|k| k.as_ptr()).collect();
        let mut all: c_int = 0;
        // SAFETY: the handle is live; `owned` keeps the strings alive during the call.
        status(unsafe { ffi::kiln_store_check(self.0, ptrs.as_ptr(), ptrs.len(), &mut all) })?;
        Ok(all != 0)
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        // SAFETY: the handle is live and dropped once.
        unsafe { ffi::kiln_store_free(self.0) }
    }
}

/// A process group of every rank, with its collectives.
pub struct Group(pub(super) *mut c_void);

// SAFETY: owned by one thread at a time; c10d's process groups may be moved between threads.
unsafe impl Send for Group {}

/// Where Gloo listens: a network interface, an address, or what the hostname resolves to.
#[derive(Debug, Clone, Default)]
pub struct Bind {
    /// The interface (`GLOO_SOCKET_IFNAME`).
    pub interface: Option<String>,
    /// The address (the loopback address of a single-machine run).
    pub host: Option<String>,
}

impl Group {
    /// The name of the group of every rank of a run (as PyTorch names its default group).
    pub const WORLD: &'static str = "default_pg";

    /// The group `name` of `world` ranks meeting at `store`, this one `rank` among them;
    /// collectives fail after `timeout` without progress. Every rank of a run makes the whole
    /// run's group, [`Group::WORLD`]; a mesh's dimension makes one group per slice, each under a
    /// name of its own.
    pub fn new(
        store: &Store,
        name: &str,
        rank: usize,
        world: usize,
        backend: Backend,
        bind: &Bind,
        timeout: Duration,
    ) -> Result<Group, CommError> {
        let (code, device) = match backend {
            Backend::Gloo => (0, 0),
            Backend::Nccl { device } => (1, device as c_int),
        };
        let name = text(name)?;
        let iface = text(bind.interface.as_deref().unwrap_or(""))?;
        let host = text(bind.host.as_deref().unwrap_or(""))?;
        // SAFETY: the store is live; the strings outlive the call.
        let p = unsafe {
            ffi::kiln_group_new(
                store.0,
                name.as_ptr(),
                rank as c_int,
                world as c_int,
                code,
                device,
                iface.as_ptr(),
                host.as_ptr(),
                millis(timeout),
            )
        };
        if p.is_null() {
            Err(last_error())
        } else {
            Ok(Group(p))
        }
    }

    /// Sums `t` in place over every rank.
    pub fn all_reduce_sum(&self, t: &Tensor) -> Result<(), CommError> {
        // SAFETY: the group is live; tch's handle is an `at::Tensor*`, written in place.
        status(unsafe { ffi::kiln_group_allreduce(self.0, t.as_ptr() as *mut c_void) })
    }

    /// Every rank's `input` laid end to end, in rank order, into `out`, which holds `world`
    /// times as many values, contiguous.
    pub fn all_gather(&self, out: &Tensor, input: &Tensor) -> Result<(), CommError> {
        // SAFETY: as for `all_reduce`.
        status(unsafe {
            ffi::kiln_group_allgather(
                self.0,
                out.as_ptr() as *mut c_void,
                input.as_ptr() as *mut c_void,
            )
        })
    }

    /// Copies `root`'s `t` into every rank's `t`.
    pub fn broadcast(&self, t: &Tensor, root: usize) -> Result<(), CommError> {
        // SAFETY: as for `all_reduce`.
        status(unsafe {
            ffi::kiln_group_broadcast(self.0, t.as_ptr() as *mut c_void, root as c_int)
        })
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        // SAFETY: the handle is live and dropped once.
        unsafe { ffi::kiln_group_free(self.0) }
    }
}

/// PyTorch's Reducer: hooks on every parameter's gradient that all-reduce full buckets while
/// backward still runs, leaving each `.grad` summed over the ranks (a communication hook in
/// place of DDP's division by the world size, `shim/c10d.cpp`).
pub struct Reducer(*mut c_void);

// SAFETY: as for `Group`.
unsafe impl Send for Reducer {}

impl Reducer {
    /// A reducer over `params` (every rank's must agree in number, shape and type; checked here
    /// with a collective), in buckets of `bucket_cap_bytes` after a first one of 1 MiB. With
    /// `stats`, PyTorch's DDP logger times every iteration ([`Reducer::stats`]).
    pub fn new(
        group: &Group,
        params: &[Tensor],
        bucket_cap_bytes: usize,
        stats: bool,
    ) -> Result<Reducer, CommError> {
        let ptrs: Vec<*mut c_void> = params.iter().map(|p| p.as_ptr() as *mut c_void).collect();
        // SAFETY: the group and tensors are live during the call; the reducer keeps its own
        // references to the tensors.
        let p = unsafe {
            ffi::kiln_reducer_new(
                group.0,
                ptrs.as_ptr(),
                ptrs.len(),
                bucket_cap_bytes as i64,
                c_int::from(stats),
            )
        };
        if p.is_null() {
            Err(last_error())
        } else {
            Ok(Reducer(p))
        }
    }

    /// Before each forward: settles the bucket order (a collective on the second step, then
    /// free) and starts the iteration.
    pub fn prepare_forward(&mut self) -> Result<(), CommError> {
        // SAFETY: the reducer is live.
        status(unsafe { ffi::kiln_reducer_prepare_forward(self.0) })
    }

    /// Arms the gradient hooks for the next backward; a micro-step that skips it keeps its
    /// gradients local (gradient accumulation without communication).
    pub fn prepare_backward(&mut self) -> Result<(), CommError> {
        // SAFETY: the reducer is live.
        status(unsafe { ffi::kiln_reducer_prepare_backward(self.0) })
    }
}

/// PyTorch's DDP timings of the backward passes, averaged over the iterations timed so far.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Overlap {
    /// Seconds of backward computation.
    pub compute: f64,
    /// Seconds from the first bucket's all-reduce to the last one's end.
    pub comm: f64,
    /// Seconds of that communication that ran while backward was still computing.
    pub overlapped: f64,
}

impl Reducer {
    /// DDP's own measure of how the gradients' communication overlapped backward; an error for
    /// a reducer made without `stats`.
    pub fn stats(&self) -> Result<Overlap, CommError> {
        let mut out = [0i64; 3];
        // SAFETY: the reducer is live; the shim writes three values.
        status(unsafe { ffi::kiln_reducer_stats(self.0, out.as_mut_ptr()) })?;
        let s = |ns: i64| ns as f64 * 1e-9;
        Ok(Overlap {
            compute: s(out[0]),
            comm: s(out[1]),
            overlapped: s(out[2]),
        })
    }
}

impl Drop for Reducer {
    fn drop(&mut self) {
        // SAFETY: the handle is live and dropped once.
        unsafe { ffi::kiln_reducer_free(self.0) }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use tch::{Device, Kind};

    /// A port nobody listens on now.
    fn free_port() -> u16 {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    }

    const T: Duration = Duration::from_secs(20);

    /// Runs `f(rank, group)` on `world` ranks, each a thread of this process with its own store
    /// connection and Gloo group on loopback.
    pub(in crate::runtime::dist) fn ranks<R: Send>(
        world: usize,
        f: impl Fn(usize, &Group) -> R + Sync,
    ) -> Vec<R> {
        let port = free_port();
        let bind = Bind {
            interface: None,
            host: Some("127.0.0.1".into()),
        };
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..world)
                .map(|rank| {
                    let (f, bind) = (&f, &bind);
                    s.spawn(move || {
                        let store = Store::connect("127.0.0.1", port, rank == 0, world, T).unwrap();
                        let g =
                            Group::new(&store, Group::WORLD, rank, world, Backend::Gloo, bind, T)
                                .unwrap();
                        f(rank, &g)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        })
    }

    #[test]
    fn collectives_sum_and_broadcast() {
        let out = ranks(3, |rank, g| {
            let t = Tensor::from_slice(&[rank as f32 + 1.0, 10.0 * rank as f32]);
            g.all_reduce_sum(&t).unwrap();
            let b = Tensor::from_slice(&[rank as f32 * 7.0]);
            g.broadcast(&b, 2).unwrap();
            (
                Vec::<f32>::try_from(&t).unwrap(),
                f32::try_from(&b).unwrap(),
            )
        });
        for (sum, b) in out {
            assert_eq!(sum, vec![6.0, 30.0]);
            assert_eq!(b, 14.0);
        }
    }

    #[test]
    fn the_store_carries_bytes_and_says_which_keys_are_missing() {
        let port = free_port();
        let server = Store::connect("127.0.0.1", port, true, 2, T).unwrap();
        let client = Store::connect("127.0.0.1", port, false, 2, T).unwrap();
        client.set("kiln/rank/1", b"{\"hash\":1}").unwrap();
        assert_eq!(server.get("kiln/rank/1").unwrap(), b"{\"hash\":1}");
        assert!(server.check(&["kiln/rank/1"]).unwrap());
        assert!(!server.check(&["kiln/rank/0", "kiln/rank/1"]).unwrap());
    }

    #[test]
    fn a_store_nobody_serves_is_an_error_not_a_hang() {
        let port = free_port();
        let started = std::time::Instant::now();
        let Err(e) = Store::connect("127.0.0.1", port, false, 2, Duration::from_secs(1)) else {
            panic!("a store with no server");
        };
        assert!(started.elapsed() < Duration::from_secs(30), "{e}");
        assert!(!e.0.is_empty());
    }

    /// With CUDA, an NCCL group of one rank all-reduces CUDA tensors and drives a Reducer;
    /// without it, asking for an NCCL group or using one is an error, not a crash.
    #[test]
    fn nccl_runs_on_cuda_and_is_an_error_without_it() {
        let port = free_port();
        let store = Store::connect("127.0.0.1", port, true, 1, T).unwrap();
        let nccl = Backend::Nccl { device: 0 };
        let group = Group::new(&store, Group::WORLD, 0, 1, nccl, &Bind::default(), T);
        if tch::Cuda::is_available() {
            let g = group.unwrap();
            let t = Tensor::from_slice(&[1.5f32, 2.0]).to_device(Device::Cuda(0));
            g.all_reduce_sum(&t).unwrap();
            assert_eq!(
                Vec::<f32>::try_from(&t.to_device(Device::Cpu)).unwrap(),
                [1.5, 2.0]
            );
            let w = Tensor::ones([3], (Kind::Float, Device::Cuda(0))).set_requires_grad(true);
            let mut r = Reducer::new(&g, std::slice::from_ref(&w), 25 << 20, false).unwrap();
            r.prepare_forward().unwrap();
            let loss = (&w * 2.0).sum(Kind::Float);
            r.prepare_backward().unwrap();
            loss.f_backward().unwrap();
            let grad = Vec::<f32>::try_from(&w.grad().to_device(Device::Cpu)).unwrap();
            assert_eq!(grad, [2.0, 2.0, 2.0]);
            return;
        }
        let failed = match group {
            Err(e) => e,
            Ok(g) => g
                .all_reduce_sum(&Tensor::from_slice(&[1.0f32]))
                .expect_err("an NCCL all-reduce without CUDA fails"),
        };
        assert!(!failed.0.is_empty());
    }

    /// The Reducer leaves on every rank the sum of the ranks' gradients: with each rank's loss
    /// its half's share of the mean over the whole batch, what one process computes on the
    /// full batch.
    #[test]
    fn the_reducer_sums_gradients_over_ranks() {
        tch::manual_seed(3);
        let w0 = Tensor::randn([4, 3], (Kind::Float, Device::Cpu));
        let x = Tensor::randn([8, 3], (Kind::Float, Device::Cpu));
        let y = Tensor::randn([8, 4], (Kind::Float, Device::Cpu));
        let full = w0.copy().set_requires_grad(true);
        x.matmul(&full.tr())
            .mse_loss(&y, tch::Reduction::Mean)
            .backward();
        let expected = full.grad();
        // Tensors are not `Sync`: each rank rebuilds them from their values.
        let values = |t: &Tensor| Vec::<f32>::try_from(&t.flatten(0, -1)).unwrap();
        let (w0, x, y) = (values(&w0), values(&x), values(&y));
        let grads = ranks(2, |rank, g| {
            let w = Tensor::from_slice(&w0)
                .reshape([4, 3])
                .set_requires_grad(true);
            let x = Tensor::from_slice(&x).reshape([8, 3]);
            let y = Tensor::from_slice(&y).reshape([8, 4]);
            let mut r = Reducer::new(g, std::slice::from_ref(&w), 25 << 20, false).unwrap();
            let (xs, ys) = (
                x.narrow(0, 4 * rank as i64, 4),
                y.narrow(0, 4 * rank as i64, 4),
            );
            r.prepare_forward().unwrap();
            let loss = xs.matmul(&w.tr()).mse_loss(&ys, tch::Reduction::Mean) * 0.5;
            r.prepare_backward().unwrap();
            loss.f_backward().unwrap();
            w.grad().copy()
        });
        for g in grads {
            let diff = (&g - &expected).abs().max().double_value(&[]);
            assert!(diff < 1e-6, "gradient differs by {diff}");
        }
    }

    /// With timings on, DDP's logger reports the backward computation and the communication of
    /// every iteration; without, asking is an error.
    #[test]
    fn the_reducer_times_communication_when_asked() {
        let out = ranks(2, |rank, g| {
            let w = Tensor::ones([256, 256], (Kind::Float, Device::Cpu)).set_requires_grad(true);
            let v = Tensor::ones([256], (Kind::Float, Device::Cpu)).set_requires_grad(true);
            let params = [w.shallow_clone(), v.shallow_clone()];
            let mut timed = Reducer::new(g, &params, 1 << 10, true).unwrap();
            let x = Tensor::full([8, 256], rank as f64 + 1.0, (Kind::Float, Device::Cpu));
            for _ in 0..4 {
                timed.prepare_forward().unwrap();
                let loss = (x.matmul(&w) + &v).tanh().sum(Kind::Float);
                timed.prepare_backward().unwrap();
                loss.f_backward().unwrap();
            }
            timed.prepare_forward().unwrap();
            let stats = timed.stats().unwrap();
            drop(timed);
            let untimed = Reducer::new(g, &params, 1 << 10, false).unwrap();
            (stats, untimed.stats().is_err())
        });
        for (s, refused) in out {
            assert!(s.compute > 0.0 && s.comm > 0.0, "{s:?}");
            assert!(
                s.overlapped >= 0.0 && s.overlapped <= s.comm + 1e-6,
                "{s:?}"
            );
            assert!(refused);
        }
    }
}
