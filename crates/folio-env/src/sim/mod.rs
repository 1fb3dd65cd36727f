//! The simulated disk: a `FileSystem` that remembers what a power loss would keep.
//!
//! Every file (an inode) has a *live* image, what reads see, and a *durable* image,
//! what survives a crash. `sync_data` applies the writes issued since the last sync to
//! the durable image. A failed `sync_data` drops those writes for good, as Linux does
//! since 4.13: the error is reported once, the dirty pages are marked clean, and a later
//! successful fsync does not write them (reads still see them, from the page cache,
//! until a crash).
//! Directory entries follow the same rule one level up: a create, rename or remove
//! changes the live namespace at once and the durable namespace only when the
//! parent directory is synced with `sync_dir`. Directories themselves are treated
//! as durable once created, as the real `create_dir_all` makes them (each synced into
//! its parent; before it did, a power cut after a bookie's first start took its
//! `current/` directories and cookies away on the lossy FUSE file system).
//!
//! [`SimFileSystem::crash`] returns the file system a power loss would leave: the
//! durable namespace with durable images, optionally with a torn last write (a
//! seeded prefix of the writes issued since the file's last sync survives, the last
//! of them possibly cut in the middle). Faults are injected by operation count:
//! fail an fsync with EIO, or fail writes with ENOSPC. Everything is deterministic:
//! the same calls and seeds give the same results.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::fs::{DiskSpace, File, FileLock, FileSystem, OpenOptions};

/// A fault that hits the first matching operation after `after_ops` more
/// mutating operations (writes, syncs, creations, renames, removals, truncations).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The first `sync_data` or `sync_dir` at or after the point fails with EIO and
    /// makes nothing durable. Later syncs succeed again, but a failed `sync_data`'s
    /// writes never become durable (as on Linux, where the error is reported once and
    /// the dirty pages are dropped): only writes issued after it do.
    SyncEio { after_ops: u64 },
    /// Every write or extension at or after the point fails with ENOSPC, until
    /// [`SimFileSystem::clear_faults`].
    WriteEnospc { after_ops: u64 },
}

/// How [`SimFileSystem::crash`] treats writes that were never synced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashMode {
    /// Only durable images survive.
    Clean,
    /// A seeded prefix of each file's unsynced writes survives, the last one possibly
    /// cut at a seeded byte.
    Torn { seed: u64 },
}

#[derive(Debug, Clone)]
enum PendingOp {
    Write { offset: u64, data: Vec<u8> },
    SetLen(u64),
}

#[derive(Debug, Clone, Default)]
struct Inode {
    live: Vec<u8>,
    durable: Vec<u8>,
    /// Operations since the last sync (successful or failed), in order: what the next
    /// successful sync makes durable, and what a torn crash keeps a prefix of.
    pending: Vec<PendingOp>,
}

#[derive(Default)]
struct State {
    inodes: HashMap<u64, Inode>,
    next_inode: u64,
    live_names: BTreeMap<PathBuf, u64>,
    durable_names: BTreeMap<PathBuf, u64>,
    dirs: BTreeSet<PathBuf>,
    ops: u64,
    faults: Vec<(u64, Fault)>,
    enospc: bool,
    capacity: u64,
    syncs: u64,
    failed_syncs: u64,
    /// Take a crash image before every operation (for crash-at-every-step tests).
    capture: Option<CrashMode>,
    captures: Vec<(u64, SimFileSystem)>,
    /// A planned power cut ([`SimFileSystem::plan_power_cut`]) and the image it took.
    cut: Option<PlannedCut>,
    cut_image: Option<(u64, SimFileSystem)>,
    /// Paths locked with `lock_exclusive` (in memory only: a crash image has none, as
    /// a dead process holds no locks).
    locks: BTreeSet<PathBuf>,
    /// Every `drop_cache` call: the file, the range, and whether the range was durable.
    dropped: Vec<DroppedRange>,
    /// Writes through handles opened with `direct` (all of them aligned: others fail).
    direct_writes: u64,
    /// Refuse `direct` opens with EINVAL, like tmpfs.
    refuse_direct: bool,
    /// Real time every `sync_data` takes (outside the lock), like a slow device.
    sync_delay: std::time::Duration,
}

/// A `drop_cache` call seen by the simulated disk (which has no cache; it only records).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DroppedRange {
    pub path: PathBuf,
    pub offset: u64,
    pub len: u64,
    /// Whether every byte of the range was durable (synced) when it was dropped.
    pub durable: bool,
}

/// Where a planned power cut lands, counted from the plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CutAt {
    /// Just before the n-th mutating operation (0: the next one).
    Op(u64),
    /// Just before the n-th `sync_data` or `sync_dir` (0: the next one): a power cut
    /// while an fsync waits, where one most often lands (the fsync is the slow part).
    Sync(u64),
}

#[derive(Debug, Clone, Copy)]
struct PlannedCut {
    at: CutAt,
    mode: CrashMode,
    start_ops: u64,
    syncs_seen: u64,
}

impl State {
    fn tick(&mut self) {
        self.tick_op(false)
    }

    /// Counts one mutating operation (`sync`: it is a sync), first taking the images
    /// asked for just before it.
    fn tick_op(&mut self, sync: bool) {
        if let Some(mut plan) = self.cut {
            let now = match plan.at {
                CutAt::Op(n) => self.ops - plan.start_ops == n,
                CutAt::Sync(n) if sync => {
                    plan.syncs_seen += 1;
                    plan.syncs_seen == n + 1
                }
                CutAt::Sync(_) => false,
            };
            if now {
                let image = crash_image(self, plan.mode);
                self.cut_image = Some((self.ops, image));
                self.cut = None;
            } else {
                self.cut = Some(plan);
            }
        }
        if let Some(mode) = self.capture {
            let mode = match mode {
                CrashMode::Clean => CrashMode::Clean,
                CrashMode::Torn { seed } => CrashMode::Torn {
                    seed: seed ^ self.ops.wrapping_mul(0x9E37_79B9_7F4A_7C15),
                },
            };
            let image = crash_image(self, mode);
            self.captures.push((self.ops, image));
        }
        self.ops += 1;
    }

    /// Whether a sync now must fail; consumes the fault.
    fn take_sync_fault(&mut self) -> bool {
        let ops = self.ops;
        if let Some(i) = self
            .faults
            .iter()
            .position(|(at, f)| matches!(f, Fault::SyncEio { .. }) && *at < ops)
        {
            self.faults.remove(i);
            return true;
        }
        false
    }

    fn check_space(&mut self, path_hint: &str, growth: u64) -> io::Result<()> {
        let ops = self.ops;
        if let Some(i) = self
            .faults
            .iter()
            .position(|(at, f)| matches!(f, Fault::WriteEnospc { .. }) && *at < ops)
        {
            self.faults.remove(i);
            self.enospc = true;
        }
        let used: u64 = self.inodes.values().map(|i| i.live.len() as u64).sum();
        if self.enospc || used.saturating_add(growth) > self.capacity {
            return Err(io::Error::new(
                io::ErrorKind::StorageFull,
                format!("write {path_hint}: No space left on device (os error 28)"),
            ));
        }
        Ok(())
    }

    fn inode_for(&self, path: &Path) -> io::Result<u64> {
        self.live_names.get(path).copied().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("{}: No such file or directory", path.display()),
            )
        })
    }

    fn check_parent(&self, path: &Path) -> io::Result<()> {
        let parent = path.parent().unwrap_or(Path::new("/"));
        if parent.as_os_str().is_empty() || self.dirs.contains(parent) {
            Ok(())
        } else {
            Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{}: parent directory does not exist", path.display()),
            ))
        }
    }
}

/// The simulated disk. Cloning shares the same disk.
#[derive(Clone)]
pub struct SimFileSystem {
    state: Arc<Mutex<State>>,
}

impl Default for SimFileSystem {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for SimFileSystem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.state.lock();
        write!(
            f,
            "SimFileSystem({} files, {} ops)",
            s.live_names.len(),
            s.ops
        )
    }
}

impl SimFileSystem {
    /// An empty disk of (practically) unlimited capacity.
    pub fn new() -> Self {
        Self::with_capacity(u64::MAX / 2)
    }

    /// An empty disk holding at most `capacity` bytes of file data; writes beyond it
    /// fail with ENOSPC.
    pub fn with_capacity(capacity: u64) -> Self {
        let state = State {
            capacity,
            dirs: [PathBuf::from("/")].into_iter().collect(),
            ..Default::default()
        };
        SimFileSystem {
            state: Arc::new(Mutex::new(state)),
        }
    }

    /// Schedules a fault, counted from now.
    pub fn inject(&self, fault: Fault) {
        let mut s = self.state.lock();
        let at = s.ops
            + match fault {
                Fault::SyncEio { after_ops } | Fault::WriteEnospc { after_ops } => after_ops,
            };
        s.faults.push((at, fault));
    }

    /// Removes scheduled faults and ends an ENOSPC condition.
    pub fn clear_faults(&self) {
        let mut s = self.state.lock();
        s.faults.clear();
        s.enospc = false;
    }

    /// Mutating operations performed so far.
    pub fn ops(&self) -> u64 {
        self.state.lock().ops
    }

    /// Successful and failed syncs (`sync_data` and `sync_dir`) so far.
    pub fn sync_counts(&self) -> (u64, u64) {
        let s = self.state.lock();
        (s.syncs, s.failed_syncs)
    }

    /// The `drop_cache` calls so far.
    /// How many writes went through handles opened with `direct`.
    pub fn direct_writes(&self) -> u64 {
        self.state.lock().direct_writes
    }

    /// From now on, every `sync_data` takes `delay` more (real time, without holding the
    /// disk's lock: other operations go on meanwhile), like a slow device. What it makes
    /// durable is fixed when it starts: writes issued during the delay are not covered.
    pub fn set_sync_delay(&self, delay: std::time::Duration) {
        self.state.lock().sync_delay = delay;
    }

    /// From now on, refuse opens with `direct` (EINVAL), as a file system without
    /// O_DIRECT support (tmpfs) does.
    pub fn refuse_direct_io(&self) {
        self.state.lock().refuse_direct = true;
    }

    pub fn dropped_ranges(&self) -> Vec<DroppedRange> {
        self.state.lock().dropped.clone()
    }

    /// The file system a power loss now would leave behind. This disk is unchanged
    /// (threads still writing to it do not affect the returned one).
    pub fn crash(&self, mode: CrashMode) -> SimFileSystem {
        crash_image(&self.state.lock(), mode)
    }

    /// From now on, takes a crash image just before every mutating operation, labelled
    /// with the number of operations completed when it was taken. With
    /// `CrashMode::Torn`, each image is torn with its own seed derived from `mode`'s.
    pub fn capture_every_op(&self, mode: CrashMode) {
        self.state.lock().capture = Some(mode);
    }

    /// Stops capturing and returns the images taken: `(ops completed, image)`.
    pub fn take_captures(&self) -> Vec<(u64, SimFileSystem)> {
        let mut s = self.state.lock();
        s.capture = None;
        std::mem::take(&mut s.captures)
    }

    /// Plans a power cut: the crash image (torn as `mode` says) just before the
    /// operation `at` names, counted from now; one image, so it costs one copy of the
    /// disk where [`SimFileSystem::capture_every_op`] costs one per operation.
    pub fn plan_power_cut(&self, at: CutAt, mode: CrashMode) {
        let mut s = self.state.lock();
        let start_ops = s.ops;
        s.cut = Some(PlannedCut {
            at,
            mode,
            start_ops,
            syncs_seen: 0,
        });
        s.cut_image = None;
    }

    /// Ends the planned power cut: the image it took, labelled with the operations
    /// completed then, or None if the operation it named never came.
    pub fn take_power_cut(&self) -> Option<(u64, SimFileSystem)> {
        let mut s = self.state.lock();
        s.cut = None;
        s.cut_image.take()
    }

    fn with_inode<T>(
        &self,
        ino: u64,
        f: impl FnOnce(&mut State, u64) -> io::Result<T>,
    ) -> io::Result<T> {
        let mut s = self.state.lock();
        if !s.inodes.contains_key(&ino) {
            return Err(io::Error::other("stale simulated file handle"));
        }
        f(&mut s, ino)
    }
}

/// The state a power loss would leave (see [`SimFileSystem::crash`]).
fn crash_image(s: &State, mode: CrashMode) -> SimFileSystem {
    let mut rng = match mode {
        CrashMode::Clean => None,
        CrashMode::Torn { seed } => Some(fastrand::Rng::with_seed(seed)),
    };
    let mut inodes = HashMap::new();
    // Iterate in path order so the seeded choices do not depend on hash order.
    for ino in s.durable_names.values() {
        if inodes.contains_key(ino) {
            continue;
        }
        let node = &s.inodes[ino];
        let mut image = node.durable.clone();
        if let Some(rng) = rng.as_mut() {
            apply_torn(&mut image, &node.pending, rng);
        }
        inodes.insert(
            *ino,
            Inode {
                live: image.clone(),
                durable: image,
                pending: Vec::new(),
            },
        );
    }
    let state = State {
        inodes,
        next_inode: s.next_inode,
        live_names: s.durable_names.clone(),
        durable_names: s.durable_names.clone(),
        dirs: s.dirs.clone(),
        capacity: s.capacity,
        ..Default::default()
    };
    SimFileSystem {
        state: Arc::new(Mutex::new(state)),
    }
}

/// Applies a seeded prefix of `pending` to `image`, the last applied op possibly cut.
fn apply_torn(image: &mut Vec<u8>, pending: &[PendingOp], rng: &mut fastrand::Rng) {
    if pending.is_empty() {
        return;
    }
    let keep = rng.usize(0..=pending.len());
    for (i, op) in pending.iter().take(keep).enumerate() {
        let last = i + 1 == keep;
        match op {
            PendingOp::Write { offset, data } => {
                let n = if last {
                    rng.usize(0..=data.len())
                } else {
                    data.len()
                };
                write_into(image, *offset, &data[..n]);
            }
            PendingOp::SetLen(len) => image.resize(*len as usize, 0),
        }
    }
}

fn write_into(image: &mut Vec<u8>, offset: u64, data: &[u8]) {
    let offset = offset as usize;
    let end = offset + data.len();
    if image.len() < end {
        image.resize(end, 0);
    }
    image[offset..end].copy_from_slice(data);
}

/// A lock taken with `lock_exclusive`; released on drop.
struct SimLock {
    fs: SimFileSystem,
    path: PathBuf,
}

impl Drop for SimLock {
    fn drop(&mut self) {
        self.fs.state.lock().locks.remove(&self.path);
    }
}

struct SimFile {
    fs: SimFileSystem,
    ino: u64,
    path: PathBuf,
    writable: bool,
    /// Opened with `direct`: reads and writes must be aligned, as Linux's O_DIRECT demands.
    direct: bool,
}

impl SimFile {
    /// Linux's EINVAL for a misaligned direct read or write.
    fn check_aligned(&self, op: &str, buf: &[u8], offset: u64) -> io::Result<()> {
        let a = crate::DIRECT_IO_ALIGN;
        if !self.direct
            || ((buf.as_ptr() as usize).is_multiple_of(a)
                && buf.len().is_multiple_of(a)
                && offset.is_multiple_of(a as u64))
        {
            return Ok(());
        }
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{op} {}: direct I/O not aligned to {a} (address {:#x}, offset {offset}, length {}): Invalid argument (os error 22)",
                self.path.display(),
                buf.as_ptr() as usize,
                buf.len()
            ),
        ))
    }

    fn check_writable(&self) -> io::Result<()> {
        if self.writable {
            Ok(())
        } else {
            Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("{}: file not opened for writing", self.path.display()),
            ))
        }
    }
}

impl File for SimFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.check_aligned("read", buf, offset)?;
        self.fs.with_inode(self.ino, |s, ino| {
            let live = &s.inodes[&ino].live;
            let start = (offset as usize).min(live.len());
            let n = buf.len().min(live.len() - start);
            buf[..n].copy_from_slice(&live[start..start + n]);
            Ok(n)
        })
    }

    /// The simulated disk has no page cache: a buffered read "is cached" or "would block"
    /// by a fixed rule of the file and offset (a third of the 4 KiB pages would block), so
    /// that both of a caller's paths run, the same way in every replay. Direct handles
    /// always would block, as O_DIRECT reads bypass the page cache.
    fn read_at_nowait(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        if self.direct || (offset / 4096 + self.ino).is_multiple_of(3) {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        self.read_at(buf, offset)
    }

    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.check_writable()?;
        self.check_aligned("write", buf, offset)?;
        let direct = self.direct;
        let hint = self.path.display().to_string();
        self.fs.with_inode(self.ino, |s, ino| {
            s.tick();
            let len = s.inodes[&ino].live.len() as u64;
            let growth = (offset + buf.len() as u64).saturating_sub(len);
            s.check_space(&hint, growth)?;
            if direct {
                s.direct_writes += 1;
            }
            let node = s.inodes.get_mut(&ino).expect("checked");
            write_into(&mut node.live, offset, buf);
            node.pending.push(PendingOp::Write {
                offset,
                data: buf.to_vec(),
            });
            Ok(())
        })
    }

    fn sync_data(&self) -> io::Result<()> {
        let delay = self.fs.state.lock().sync_delay;
        let hint = self.path.display().to_string();
        let r = self.fs.with_inode(self.ino, |s, ino| {
            s.tick_op(true);
            if s.take_sync_fault() {
                s.failed_syncs += 1;
                // As with Linux writeback errors: the error is reported once and the
                // writes it covered never reach the disk, not even at a later
                // successful sync (the pages were marked clean); the live image keeps
                // them, as the page cache does.
                let node = s.inodes.get_mut(&ino).expect("checked");
                node.pending.clear();
                return Err(io::Error::other(format!(
                    "fdatasync {hint}: Input/output error (os error 5)"
                )));
            }
            s.syncs += 1;
            let node = s.inodes.get_mut(&ino).expect("checked");
            // Only the writes since the last sync: after a failed one the durable image
            // and the live one differ for good where its writes were dropped.
            for op in std::mem::take(&mut node.pending) {
                match op {
                    PendingOp::Write { offset, data } => {
                        write_into(&mut node.durable, offset, &data)
                    }
                    PendingOp::SetLen(len) => node.durable.resize(len as usize, 0),
                }
            }
            Ok(())
        });
        // The slow part comes after what the call made durable was fixed: writes issued
        // meanwhile are not covered (the strict reading of fdatasync).
        if !delay.is_zero() {
            std::thread::sleep(delay);
        }
        r
    }

    fn len(&self) -> io::Result<u64> {
        self.fs
            .with_inode(self.ino, |s, ino| Ok(s.inodes[&ino].live.len() as u64))
    }

    fn drop_cache(&self, offset: u64, len: u64) -> io::Result<()> {
        let path = self.path.clone();
        self.fs.with_inode(self.ino, |s, ino| {
            let node = &s.inodes[&ino];
            let range = |v: &Vec<u8>| {
                let start = (offset as usize).min(v.len());
                let end = (offset.saturating_add(len) as usize).min(v.len());
                v[start..end].to_vec()
            };
            let durable = node.durable.len() as u64 >= offset.saturating_add(len)
                && range(&node.live) == range(&node.durable);
            s.dropped.push(DroppedRange {
                path,
                offset,
                len,
                durable,
            });
            Ok(())
        })
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.check_writable()?;
        let hint = self.path.display().to_string();
        self.fs.with_inode(self.ino, |s, ino| {
            s.tick();
            let cur = s.inodes[&ino].live.len() as u64;
            // Shrinking a file needs no room, on a full disk too (as on Linux).
            if len > cur {
                s.check_space(&hint, len - cur)?;
            }
            let node = s.inodes.get_mut(&ino).expect("checked");
            node.live.resize(len as usize, 0);
            node.pending.push(PendingOp::SetLen(len));
            Ok(())
        })
    }

    fn allocate(&self, _len: u64) -> io::Result<()> {
        // Reservation without a visible change; the simulated disk has nothing to do.
        Ok(())
    }
}

impl FileSystem for SimFileSystem {
    fn open(&self, path: &Path, opts: OpenOptions) -> io::Result<Arc<dyn File>> {
        let mut s = self.state.lock();
        if opts.direct && s.refuse_direct {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("open {}: Invalid argument (os error 22)", path.display()),
            ));
        }
        let existing = s.live_names.get(path).copied();
        let ino = match existing {
            Some(_) if opts.create_new => {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!("open {}: File exists", path.display()),
                ));
            }
            Some(ino) => {
                if opts.truncate {
                    s.tick();
                    let node = s.inodes.get_mut(&ino).expect("named inode exists");
                    node.live.clear();
                    node.pending.push(PendingOp::SetLen(0));
                }
                ino
            }
            None if opts.create || opts.create_new => {
                s.check_parent(path)?;
                s.tick();
                let ino = s.next_inode;
                s.next_inode += 1;
                s.inodes.insert(ino, Inode::default());
                s.live_names.insert(path.to_path_buf(), ino);
                ino
            }
            None => return Err(s.inode_for(path).unwrap_err()),
        };
        let writable = opts.write || opts.create || opts.create_new || opts.truncate;
        Ok(Arc::new(SimFile {
            fs: self.clone(),
            ino,
            path: path.to_path_buf(),
            writable,
            direct: opts.direct,
        }))
    }

    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        let mut s = self.state.lock();
        s.tick();
        for a in path.ancestors() {
            if !a.as_os_str().is_empty() {
                s.dirs.insert(a.to_path_buf());
            }
        }
        Ok(())
    }

    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        let s = self.state.lock();
        if !s.dirs.contains(path) {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("list {}: No such file or directory", path.display()),
            ));
        }
        let mut names: Vec<String> = s
            .live_names
            .keys()
            .chain(s.dirs.iter())
            .filter(|p| p.parent() == Some(path))
            .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .collect();
        names.sort();
        names.dedup();
        Ok(names)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let mut s = self.state.lock();
        s.inode_for(path)?;
        s.tick();
        s.live_names.remove(path);
        Ok(())
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut s = self.state.lock();
        let ino = s.inode_for(from)?;
        s.check_parent(to)?;
        s.tick();
        s.live_names.remove(from);
        s.live_names.insert(to.to_path_buf(), ino);
        Ok(())
    }

    fn exists(&self, path: &Path) -> bool {
        let s = self.state.lock();
        s.live_names.contains_key(path) || s.dirs.contains(path)
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        let mut s = self.state.lock();
        if !s.dirs.contains(path) {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!(
                    "open directory {}: No such file or directory",
                    path.display()
                ),
            ));
        }
        s.tick_op(true);
        if s.take_sync_fault() {
            s.failed_syncs += 1;
            return Err(io::Error::other(format!(
                "fsync directory {}: Input/output error (os error 5)",
                path.display()
            )));
        }
        s.syncs += 1;
        let in_dir = |p: &PathBuf| p.parent() == Some(path);
        let State {
            live_names,
            durable_names,
            ..
        } = &mut *s;
        durable_names.retain(|p, _| !in_dir(p));
        for (p, ino) in live_names.iter().filter(|(p, _)| in_dir(p)) {
            durable_names.insert(p.clone(), *ino);
        }
        Ok(())
    }

    fn lock_exclusive(&self, path: &Path) -> io::Result<FileLock> {
        let mut s = self.state.lock();
        s.check_parent(path)?;
        if !s.locks.insert(path.to_path_buf()) {
            return Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                format!(
                    "lock {}: Resource temporarily unavailable (os error 11)",
                    path.display()
                ),
            ));
        }
        Ok(Box::new(SimLock {
            fs: self.clone(),
            path: path.to_path_buf(),
        }))
    }

    fn space(&self, _path: &Path) -> io::Result<DiskSpace> {
        let s = self.state.lock();
        let used: u64 = s.inodes.values().map(|i| i.live.len() as u64).sum();
        Ok(DiskSpace {
            free: s.capacity.saturating_sub(used),
            total: s.capacity,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> PathBuf {
        PathBuf::from(s)
    }

    fn setup() -> SimFileSystem {
        let fs = SimFileSystem::new();
        fs.create_dir_all(&p("/d")).unwrap();
        fs
    }

    #[test]
    fn unsynced_data_is_lost_synced_data_survives() {
        let fs = setup();
        let f = fs.open(&p("/d/a"), OpenOptions::create_new()).unwrap();
        fs.sync_dir(&p("/d")).unwrap();
        f.write_all_at(b"hello", 0).unwrap();
        f.sync_data().unwrap();
        f.write_all_at(b" world", 5).unwrap();
        assert_eq!(fs.read_file(&p("/d/a")).unwrap(), b"hello world");
        let after = fs.crash(CrashMode::Clean);
        assert_eq!(after.read_file(&p("/d/a")).unwrap(), b"hello");
    }

    #[test]
    fn a_direct_file_refuses_unaligned_io_like_linux() {
        let fs = setup();
        let f = fs
            .open(&p("/d/j"), OpenOptions::create_new().direct(true))
            .unwrap();
        let a = crate::DIRECT_IO_ALIGN;
        let mut block = crate::AlignedBuf::zeroed(a);
        block.as_mut_slice()[..5].copy_from_slice(b"hello");
        f.write_all_at(block.as_slice(), a as u64).unwrap();
        for (what, r) in [
            ("length", f.write_all_at(&block.as_slice()[..100], 0)),
            ("offset", f.write_all_at(block.as_slice(), 512)),
            ("address", f.write_all_at(&block.as_slice()[1..], 0)),
        ] {
            let e = r.expect_err(what);
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{what}: {e}");
            assert!(e.to_string().contains("/d/j"), "{e}");
        }
        let mut back = crate::AlignedBuf::zeroed(a);
        f.read_exact_at(back.as_mut_slice(), a as u64).unwrap();
        assert_eq!(&back.as_slice()[..5], b"hello");
        let mut small = [0u8; 5];
        assert!(
            f.read_at(&mut small, a as u64).is_err(),
            "unaligned direct read"
        );
        // A buffered handle on the same file sees the bytes and may read anywhere.
        let buffered = fs.open(&p("/d/j"), OpenOptions::read()).unwrap();
        let mut five = [0u8; 5];
        buffered.read_exact_at(&mut five, a as u64).unwrap();
        assert_eq!(&five, b"hello");
    }

    #[test]
    fn a_created_file_needs_its_directory_synced() {
        let fs = setup();
        let f = fs.open(&p("/d/a"), OpenOptions::create_new()).unwrap();
        f.write_all_at(b"x", 0).unwrap();
        f.sync_data().unwrap();
        assert!(!fs.crash(CrashMode::Clean).exists(&p("/d/a")));
        fs.sync_dir(&p("/d")).unwrap();
        assert_eq!(
            fs.crash(CrashMode::Clean).read_file(&p("/d/a")).unwrap(),
            b"x"
        );
    }

    #[test]
    fn rename_and_remove_are_durable_only_after_sync_dir() {
        let fs = setup();
        fs.write_file_atomic(&p("/d/m"), b"v1").unwrap();
        let f = fs.open(&p("/d/m.tmp"), OpenOptions::create_new()).unwrap();
        f.write_all_at(b"v2", 0).unwrap();
        f.sync_data().unwrap();
        fs.rename(&p("/d/m.tmp"), &p("/d/m")).unwrap();
        assert_eq!(fs.read_file(&p("/d/m")).unwrap(), b"v2");
        assert_eq!(
            fs.crash(CrashMode::Clean).read_file(&p("/d/m")).unwrap(),
            b"v1"
        );
        fs.sync_dir(&p("/d")).unwrap();
        assert_eq!(
            fs.crash(CrashMode::Clean).read_file(&p("/d/m")).unwrap(),
            b"v2"
        );

        fs.remove_file(&p("/d/m")).unwrap();
        assert!(!fs.exists(&p("/d/m")));
        assert!(fs.crash(CrashMode::Clean).exists(&p("/d/m")));
        fs.sync_dir(&p("/d")).unwrap();
        assert!(!fs.crash(CrashMode::Clean).exists(&p("/d/m")));
        assert_eq!(fs.list_dir(&p("/d")).unwrap(), Vec::<String>::new());
    }

    #[test]
    fn torn_crash_keeps_a_prefix_of_unsynced_writes() {
        let fs = setup();
        let f = fs.open(&p("/d/a"), OpenOptions::create_new()).unwrap();
        fs.sync_dir(&p("/d")).unwrap();
        f.write_all_at(b"base", 0).unwrap();
        f.sync_data().unwrap();
        f.write_all_at(b"0123456789", 4).unwrap();
        f.write_all_at(b"abcdefghij", 14).unwrap();
        let full = b"base0123456789abcdefghij";
        let mut lengths = BTreeSet::new();
        for seed in 0..200 {
            let img = fs
                .crash(CrashMode::Torn { seed })
                .read_file(&p("/d/a"))
                .unwrap();
            assert!(
                full.starts_with(&img),
                "seed {seed}: {img:?} is not a prefix"
            );
            assert!(img.len() >= 4, "synced bytes must survive");
            lengths.insert(img.len());
        }
        assert!(
            lengths.len() > 5,
            "tearing should vary with the seed: {lengths:?}"
        );
        // Same seed, same result.
        let a = fs.crash(CrashMode::Torn { seed: 9 }).read_file(&p("/d/a"));
        let b = fs.crash(CrashMode::Torn { seed: 9 }).read_file(&p("/d/a"));
        assert_eq!(a.unwrap(), b.unwrap());
    }

    #[test]
    fn injected_fsync_failure_fails_once_and_keeps_nothing() {
        let fs = setup();
        let f = fs.open(&p("/d/a"), OpenOptions::create_new()).unwrap();
        fs.sync_dir(&p("/d")).unwrap();
        fs.inject(Fault::SyncEio { after_ops: 1 });
        f.write_all_at(b"lost", 0).unwrap();
        let e = f.sync_data().unwrap_err();
        assert!(e.to_string().contains("/d/a"), "{e}");
        assert_eq!(fs.sync_counts().1, 1);
        assert_eq!(
            fs.crash(CrashMode::Torn { seed: 1 })
                .read_file(&p("/d/a"))
                .unwrap(),
            b""
        );
        f.write_all_at(b"kept", 0).unwrap();
        f.sync_data().unwrap();
        assert_eq!(
            fs.crash(CrashMode::Clean).read_file(&p("/d/a")).unwrap(),
            b"kept"
        );
    }

    /// Linux since 4.13: the writes a failed fsync covered are dropped for good. A later
    /// successful fsync makes only what was written after the failure durable; reads
    /// still see the dropped bytes (the page cache) until a crash.
    /// A planned power cut takes the image just before the operation it names: the n-th
    /// from the plan, or the n-th sync.
    #[test]
    fn a_planned_power_cut_keeps_what_was_durable_before_that_operation() {
        let run = |at| {
            let fs = setup();
            let f = fs.open(&p("/d/a"), OpenOptions::create_new()).unwrap();
            fs.sync_dir(&p("/d")).unwrap();
            fs.plan_power_cut(at, CrashMode::Clean);
            // Operations 0 (write), 1 (sync), 2 (write), 3 (sync).
            f.write_all_at(b"one", 0).unwrap();
            f.sync_data().unwrap();
            f.write_all_at(b"two", 3).unwrap();
            f.sync_data().unwrap();
            fs.take_power_cut()
                .map(|(ops, img)| (ops, img.read_file(&p("/d/a")).unwrap()))
        };
        let base = {
            let fs = setup();
            fs.open(&p("/d/a"), OpenOptions::create_new()).unwrap();
            fs.sync_dir(&p("/d")).unwrap();
            fs.ops()
        };
        assert_eq!(run(CutAt::Op(1)), Some((base + 1, b"".to_vec())));
        assert_eq!(run(CutAt::Op(2)), Some((base + 2, b"one".to_vec())));
        assert_eq!(run(CutAt::Sync(0)), Some((base + 1, b"".to_vec())));
        assert_eq!(run(CutAt::Sync(1)), Some((base + 3, b"one".to_vec())));
        assert_eq!(run(CutAt::Op(9)), None, "only four operations");
    }

    #[test]
    fn a_failed_fsync_drops_its_writes_for_good() {
        let fs = setup();
        let f = fs.open(&p("/d/a"), OpenOptions::create_new()).unwrap();
        fs.sync_dir(&p("/d")).unwrap();
        f.write_all_at(b"base", 0).unwrap();
        f.sync_data().unwrap();
        f.write_all_at(b"LOST", 4).unwrap();
        fs.inject(Fault::SyncEio { after_ops: 0 });
        assert!(f.sync_data().is_err());
        f.write_all_at(b"next", 8).unwrap();
        f.sync_data().unwrap();
        assert_eq!(fs.read_file(&p("/d/a")).unwrap(), b"baseLOSTnext");
        assert_eq!(
            fs.crash(CrashMode::Clean).read_file(&p("/d/a")).unwrap(),
            b"base\0\0\0\0next",
            "the failed fsync's write must not become durable"
        );
        // Written again after the failure, it is durable at the next sync.
        f.write_all_at(b"LOST", 4).unwrap();
        f.sync_data().unwrap();
        assert_eq!(
            fs.crash(CrashMode::Clean).read_file(&p("/d/a")).unwrap(),
            b"baseLOSTnext"
        );
    }

    #[test]
    fn enospc_after_n_ops_and_on_capacity() {
        let fs = setup();
        let f = fs.open(&p("/d/a"), OpenOptions::create_new()).unwrap();
        fs.inject(Fault::WriteEnospc { after_ops: 2 });
        f.write_all_at(b"1", 0).unwrap();
        f.write_all_at(b"2", 1).unwrap();
        let e = f.write_all_at(b"3", 2).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::StorageFull);
        assert!(e.to_string().contains("/d/a"), "{e}");
        assert!(f.write_all_at(b"4", 3).is_err(), "ENOSPC persists");
        fs.clear_faults();
        f.write_all_at(b"3", 2).unwrap();

        let small = SimFileSystem::with_capacity(10);
        small.create_dir_all(&p("/d")).unwrap();
        let g = small.open(&p("/d/b"), OpenOptions::create_new()).unwrap();
        g.write_all_at(&[1; 10], 0).unwrap();
        assert_eq!(small.space(&p("/d")).unwrap().free, 0);
        assert_eq!(
            g.write_all_at(&[1], 10).unwrap_err().kind(),
            io::ErrorKind::StorageFull
        );
        g.write_all_at(&[2; 10], 0).unwrap(); // overwriting needs no space
    }

    #[test]
    fn captures_show_each_step_durable_or_not() {
        let fs = setup();
        let f = fs.open(&p("/d/a"), OpenOptions::create_new()).unwrap();
        fs.sync_dir(&p("/d")).unwrap();
        let start = fs.ops();
        fs.capture_every_op(CrashMode::Clean);
        f.write_all_at(b"one", 0).unwrap();
        f.sync_data().unwrap();
        f.write_all_at(b"two", 3).unwrap();
        let caps = fs.take_captures();
        let seen: Vec<(u64, Vec<u8>)> = caps
            .iter()
            .map(|(n, img)| (n - start, img.read_file(&p("/d/a")).unwrap()))
            .collect();
        assert_eq!(
            seen,
            vec![(0, b"".to_vec()), (1, b"".to_vec()), (2, b"one".to_vec())]
        );
        f.sync_data().unwrap();
        assert!(fs.take_captures().is_empty(), "capturing stopped");
    }

    #[test]
    fn a_lock_excludes_others_until_dropped_and_not_after_a_crash() {
        let fs = setup();
        let held = fs.lock_exclusive(&p("/d/LOCK")).unwrap();
        let e = fs.lock_exclusive(&p("/d/LOCK")).err().unwrap();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        assert!(e.to_string().contains("/d/LOCK"), "{e}");
        fs.crash(CrashMode::Clean)
            .lock_exclusive(&p("/d/LOCK"))
            .unwrap();
        drop(held);
        fs.lock_exclusive(&p("/d/LOCK")).unwrap();
        assert!(fs.lock_exclusive(&p("/nodir/LOCK")).is_err());
    }

    #[test]
    fn errors_for_missing_files_and_parents() {
        let fs = setup();
        assert_eq!(
            fs.open(&p("/d/none"), OpenOptions::read())
                .err()
                .unwrap()
                .kind(),
            io::ErrorKind::NotFound
        );
        assert!(fs.open(&p("/nodir/x"), OpenOptions::create_new()).is_err());
        let f = fs.open(&p("/d/a"), OpenOptions::create_new()).unwrap();
        assert!(fs.open(&p("/d/a"), OpenOptions::create_new()).is_err());
        drop(f);
        let r = fs.open(&p("/d/a"), OpenOptions::read()).unwrap();
        assert!(r.write_all_at(b"x", 0).is_err());
    }
}
