//! A FUSE file system that loses what was not fsynced when the test cuts the power (in the
//! spirit of Jepsen's LazyFS), for power-loss tests of real bookie processes.
//!
//! `LossyFs::mount(backing, mountpoint)` serves the directory `backing` at `mountpoint`.
//! File data written through the mount is held in memory, page by page, until an `fsync`
//! or `fdatasync` of that file writes it into `backing` and syncs it there; reads see the
//! held data. [`LossyFs::cut_power`] drops every page not yet synced, and every size change
//! not yet synced, in one step: what a machine finds after a power loss, page cache
//! included (every open is answered with `FOPEN_DIRECT_IO`, so the kernel caches no file
//! data of its own that could survive the cut). The test kills the processes using the
//! mount first (SIGKILL), then cuts the power, then restarts them on the same mount.
//!
//! Kinder than Linux in one respect, stated: directory operations (create, mkdir, rename,
//! unlink, rmdir) reach `backing` at once, as if every one were followed by an fsync of its
//! directory. Data is the part bookies must fsync, and the part this file system tests.
//!
//! Needs /dev/fuse and root (the mount is a `mount(2)` call; no fusermount).

use std::collections::{BTreeMap, HashMap};
use std::ffi::{CString, OsStr};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::consts::FOPEN_DIRECT_IO;
use fuser::{
    BackgroundSession, FileAttr, FileType, Filesystem, MountOption, ReplyAttr, ReplyCreate,
    ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request,
    TimeOrNow,
};

const PAGE: u64 = 4096;
/// Attributes and entries are never cached by the kernel: sizes change at a power cut.
const TTL: Duration = Duration::ZERO;

/// A file's writes since its last fsync.
#[derive(Debug, Default)]
struct Pending {
    /// Whole pages, by page index, as they read now.
    pages: BTreeMap<u64, Vec<u8>>,
    /// The file's size as it reads now.
    size: u64,
    /// The smallest size since the last fsync: the backing file's bytes at and past it
    /// are not part of the file any more (a truncation not yet synced).
    floor: u64,
}

/// Counts of what the file system did, for a test to show the cut dropped something.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct LossyStats {
    pub fsyncs: u64,
    /// Pages dropped by power cuts, and the cuts.
    pub pages_dropped: u64,
    pub cuts: u64,
}

#[derive(Default)]
struct State {
    backing: PathBuf,
    /// Inode -> path relative to `backing` ("" for the root), and back.
    paths: HashMap<u64, PathBuf>,
    inodes: HashMap<PathBuf, u64>,
    next_ino: u64,
    pending: HashMap<u64, Pending>,
    stats: LossyStats,
}

impl State {
    fn full(&self, rel: &Path) -> PathBuf {
        if rel.as_os_str().is_empty() {
            self.backing.clone()
        } else {
            self.backing.join(rel)
        }
    }

    fn path_of(&self, ino: u64) -> Result<PathBuf, i32> {
        self.paths.get(&ino).cloned().ok_or(libc::ENOENT)
    }

    fn child(&self, parent: u64, name: &OsStr) -> Result<PathBuf, i32> {
        Ok(self.path_of(parent)?.join(name))
    }

    fn ino_for(&mut self, rel: &Path) -> u64 {
        if let Some(&i) = self.inodes.get(rel) {
            return i;
        }
        let i = self.next_ino;
        self.next_ino += 1;
        self.paths.insert(i, rel.to_path_buf());
        self.inodes.insert(rel.to_path_buf(), i);
        i
    }

    fn forget_path(&mut self, rel: &Path) {
        if let Some(i) = self.inodes.remove(rel) {
            self.paths.remove(&i);
            self.pending.remove(&i);
        }
    }

    fn attr(&mut self, rel: &Path) -> Result<FileAttr, i32> {
        let md = std::fs::symlink_metadata(self.full(rel)).map_err(errno)?;
        let ino = self.ino_for(rel);
        let kind = if md.is_dir() {
            FileType::Directory
        } else if md.file_type().is_symlink() {
            FileType::Symlink
        } else {
            FileType::RegularFile
        };
        let size = self.pending.get(&ino).map_or(md.len(), |p| p.size);
        let time = |s: i64, ns: i64| {
            UNIX_EPOCH + Duration::from_secs(s.max(0) as u64) + Duration::from_nanos(ns as u64)
        };
        Ok(FileAttr {
            ino,
            size,
            blocks: size.div_ceil(512),
            atime: time(md.atime(), md.atime_nsec()),
            mtime: time(md.mtime(), md.mtime_nsec()),
            ctime: time(md.ctime(), md.ctime_nsec()),
            crtime: SystemTime::UNIX_EPOCH,
            kind,
            perm: (md.mode() & 0o7777) as u16,
            nlink: md.nlink() as u32,
            uid: md.uid(),
            gid: md.gid(),
            rdev: 0,
            blksize: PAGE as u32,
            flags: 0,
        })
    }

    /// The file's pending writes, started from the backing file if there are none yet.
    fn pending_mut(&mut self, ino: u64) -> Result<&mut Pending, i32> {
        if !self.pending.contains_key(&ino) {
            let rel = self.path_of(ino)?;
            let len = std::fs::metadata(self.full(&rel)).map_err(errno)?.len();
            self.pending.insert(
                ino,
                Pending {
                    pages: BTreeMap::new(),
                    size: len,
                    floor: len,
                },
            );
        }
        Ok(self.pending.get_mut(&ino).expect("just inserted"))
    }

    /// `len` bytes at `off` as they read now (short at the end of the file).
    fn read(&mut self, ino: u64, off: u64, len: u64) -> Result<Vec<u8>, i32> {
        let rel = self.path_of(ino)?;
        let file = File::open(self.full(&rel)).map_err(errno)?;
        let Some(p) = self.pending.get(&ino) else {
            let mut buf = vec![0u8; len as usize];
            let n = read_full(&file, &mut buf, off).map_err(errno)?;
            buf.truncate(n);
            return Ok(buf);
        };
        let end = (off + len).min(p.size);
        if off >= end {
            return Ok(Vec::new());
        }
        let mut out = Vec::with_capacity((end - off) as usize);
        let mut at = off;
        while at < end {
            let page = at / PAGE;
            let in_page = (at % PAGE) as usize;
            let take = ((page + 1) * PAGE).min(end) - at;
            match p.pages.get(&page) {
                Some(bytes) => out.extend_from_slice(&bytes[in_page..in_page + take as usize]),
                None => out.extend_from_slice(&backing_bytes(&file, p.floor, at, take)?),
            }
            at += take;
        }
        Ok(out)
    }

    fn write(&mut self, ino: u64, off: u64, data: &[u8]) -> Result<(), i32> {
        let rel = self.path_of(ino)?;
        let file = File::open(self.full(&rel)).map_err(errno)?;
        let p = self.pending_mut(ino)?;
        let mut at = off;
        let mut rest = data;
        while !rest.is_empty() {
            let page = at / PAGE;
            let in_page = (at % PAGE) as usize;
            let take = rest.len().min(PAGE as usize - in_page);
            if !p.pages.contains_key(&page) {
                let base = backing_bytes(&file, p.floor.min(p.size), page * PAGE, PAGE)?;
                p.pages.insert(page, base);
            }
            let bytes = p.pages.get_mut(&page).expect("just inserted");
            bytes[in_page..in_page + take].copy_from_slice(&rest[..take]);
            at += take as u64;
            rest = &rest[take..];
        }
        p.size = p.size.max(off + data.len() as u64);
        Ok(())
    }

    fn truncate(&mut self, ino: u64, size: u64) -> Result<(), i32> {
        let p = self.pending_mut(ino)?;
        p.size = size;
        p.floor = p.floor.min(size);
        let last = size.div_ceil(PAGE);
        p.pages.retain(|&i, _| i < last);
        if !size.is_multiple_of(PAGE)
            && let Some(bytes) = p.pages.get_mut(&(size / PAGE))
        {
            bytes[(size % PAGE) as usize..].fill(0);
        }
        Ok(())
    }

    /// Makes the file's pending writes durable in the backing file.
    fn fsync(&mut self, ino: u64) -> Result<(), i32> {
        self.stats.fsyncs += 1;
        let Some(p) = self.pending.remove(&ino) else {
            return Ok(());
        };
        let rel = self.path_of(ino)?;
        let file = OpenOptions::new()
            .write(true)
            .open(self.full(&rel))
            .map_err(errno)?;
        let result = (|| {
            let on_disk = file.metadata()?.len();
            if p.floor < on_disk {
                file.set_len(p.floor)?;
            }
            for (&page, bytes) in &p.pages {
                let start = page * PAGE;
                if start >= p.size {
                    continue;
                }
                let n = (p.size - start).min(PAGE) as usize;
                file.write_all_at(&bytes[..n], start)?;
            }
            file.set_len(p.size)?;
            file.sync_all()
        })();
        if let Err(e) = result {
            // Keep the writes pending: a later fsync may still make them durable.
            self.pending.insert(ino, p);
            return Err(errno(e));
        }
        Ok(())
    }
}

/// `len` bytes at `at` of the backing file, zeroes at and past `floor` and past its end.
fn backing_bytes(file: &File, floor: u64, at: u64, len: u64) -> Result<Vec<u8>, i32> {
    let mut buf = vec![0u8; len as usize];
    if at < floor {
        let want = (floor - at).min(len) as usize;
        read_full(file, &mut buf[..want], at).map_err(errno)?;
    }
    Ok(buf)
}

fn read_full(file: &File, buf: &mut [u8], off: u64) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match file.read_at(&mut buf[n..], off + n as u64) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

fn errno(e: io::Error) -> i32 {
    e.raw_os_error().unwrap_or(libc::EIO)
}

/// The FUSE side: every call locks the shared state.
struct Fs(Arc<Mutex<State>>);

impl Fs {
    fn state(&self) -> MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

macro_rules! tri {
    ($reply:ident, $e:expr) => {
        match $e {
            Ok(v) => v,
            Err(code) => return $reply.error(code),
        }
    };
}

impl Filesystem for Fs {
    fn lookup(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEntry) {
        let mut s = self.state();
        let rel = tri!(reply, s.child(parent, name));
        let attr = tri!(reply, s.attr(&rel));
        reply.entry(&TTL, &attr, 0);
    }

    fn getattr(&mut self, _req: &Request<'_>, ino: u64, _fh: Option<u64>, reply: ReplyAttr) {
        let mut s = self.state();
        let rel = tri!(reply, s.path_of(ino));
        let attr = tri!(reply, s.attr(&rel));
        reply.attr(&TTL, &attr);
    }

    fn setattr(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<u64>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<u32>,
        reply: ReplyAttr,
    ) {
        let mut s = self.state();
        let rel = tri!(reply, s.path_of(ino));
        if let Some(m) = mode {
            let perm = std::fs::Permissions::from_mode(m & 0o7777);
            tri!(
                reply,
                std::fs::set_permissions(s.full(&rel), perm).map_err(errno)
            );
        }
        if let Some(size) = size {
            tri!(reply, s.truncate(ino, size));
        }
        let attr = tri!(reply, s.attr(&rel));
        reply.attr(&TTL, &attr);
    }

    fn mkdir(
        &mut self,
        _req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        let mut s = self.state();
        let rel = tri!(reply, s.child(parent, name));
        tri!(reply, std::fs::create_dir(s.full(&rel)).map_err(errno));
        let perm = std::fs::Permissions::from_mode(mode & 0o7777);
        let _ = std::fs::set_permissions(s.full(&rel), perm);
        let attr = tri!(reply, s.attr(&rel));
        reply.entry(&TTL, &attr, 0);
    }

    fn unlink(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEmpty) {
        let mut s = self.state();
        let rel = tri!(reply, s.child(parent, name));
        tri!(reply, std::fs::remove_file(s.full(&rel)).map_err(errno));
        s.forget_path(&rel);
        reply.ok();
    }

    fn rmdir(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEmpty) {
        let mut s = self.state();
        let rel = tri!(reply, s.child(parent, name));
        tri!(reply, std::fs::remove_dir(s.full(&rel)).map_err(errno));
        s.forget_path(&rel);
        reply.ok();
    }

    fn rename(
        &mut self,
        _req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        newparent: u64,
        newname: &OsStr,
        flags: u32,
        reply: ReplyEmpty,
    ) {
        let mut s = self.state();
        let from = tri!(reply, s.child(parent, name));
        let to = tri!(reply, s.child(newparent, newname));
        if flags & libc::RENAME_NOREPLACE != 0 && s.full(&to).exists() {
            return reply.error(libc::EEXIST);
        }
        if flags & !libc::RENAME_NOREPLACE != 0 {
            return reply.error(libc::EINVAL);
        }
        tri!(
            reply,
            std::fs::rename(s.full(&from), s.full(&to)).map_err(errno)
        );
        // What was at `to` is gone; everything at or under `from` moves to `to`.
        s.forget_path(&to);
        let moved: Vec<(PathBuf, u64)> = s
            .inodes
            .iter()
            .filter(|(p, _)| p.starts_with(&from))
            .map(|(p, &i)| (p.clone(), i))
            .collect();
        for (old, i) in moved {
            let under = old.strip_prefix(&from).expect("filtered by prefix");
            // (Joining an empty path would append a '/'.)
            let new = if under.as_os_str().is_empty() {
                to.clone()
            } else {
                to.join(under)
            };
            s.inodes.remove(&old);
            s.inodes.insert(new.clone(), i);
            s.paths.insert(i, new);
        }
        reply.ok();
    }

    fn open(&mut self, _req: &Request<'_>, ino: u64, _flags: i32, reply: ReplyOpen) {
        let s = self.state();
        let rel = tri!(reply, s.path_of(ino));
        if !s.full(&rel).exists() {
            return reply.error(libc::ENOENT);
        }
        reply.opened(0, FOPEN_DIRECT_IO);
    }

    fn create(
        &mut self,
        _req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let mut s = self.state();
        let rel = tri!(reply, s.child(parent, name));
        let mut o = OpenOptions::new();
        o.write(true).create(true);
        if flags & libc::O_EXCL != 0 {
            o.create_new(true);
        }
        tri!(reply, o.open(s.full(&rel)).map_err(errno));
        let perm = std::fs::Permissions::from_mode(mode & 0o7777);
        let _ = std::fs::set_permissions(s.full(&rel), perm);
        let ino = s.ino_for(&rel);
        if flags & libc::O_TRUNC != 0 {
            tri!(reply, s.truncate(ino, 0));
        }
        let attr = tri!(reply, s.attr(&rel));
        reply.created(&TTL, &attr, 0, 0, FOPEN_DIRECT_IO);
    }

    fn read(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        size: u32,
        _flags: i32,
        _lock_owner: Option<u64>,
        reply: ReplyData,
    ) {
        let data = tri!(
            reply,
            self.state().read(ino, offset as u64, u64::from(size))
        );
        reply.data(&data);
    }

    fn write(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        data: &[u8],
        _write_flags: u32,
        _flags: i32,
        _lock_owner: Option<u64>,
        reply: ReplyWrite,
    ) {
        tri!(reply, self.state().write(ino, offset as u64, data));
        reply.written(data.len() as u32);
    }

    fn flush(&mut self, _req: &Request<'_>, _ino: u64, _fh: u64, _lo: u64, reply: ReplyEmpty) {
        // close() is not a sync: the data stays pending.
        reply.ok();
    }

    fn fsync(&mut self, _req: &Request<'_>, ino: u64, _fh: u64, _ds: bool, reply: ReplyEmpty) {
        tri!(reply, self.state().fsync(ino));
        reply.ok();
    }

    fn fsyncdir(&mut self, _req: &Request<'_>, _ino: u64, _fh: u64, _ds: bool, reply: ReplyEmpty) {
        // Directory operations are applied at once (see the module note).
        reply.ok();
    }

    fn fallocate(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        length: i64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        if mode != 0 {
            return reply.error(libc::EOPNOTSUPP);
        }
        let mut s = self.state();
        let end = (offset + length) as u64;
        let p = tri!(reply, s.pending_mut(ino));
        p.size = p.size.max(end);
        reply.ok();
    }

    fn readdir(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        mut reply: ReplyDirectory,
    ) {
        let mut s = self.state();
        let rel = tri!(reply, s.path_of(ino));
        let read = tri!(reply, std::fs::read_dir(s.full(&rel)).map_err(errno));
        let mut entries = vec![
            (ino, FileType::Directory, OsStr::new(".").to_os_string()),
            (ino, FileType::Directory, OsStr::new("..").to_os_string()),
        ];
        for e in read.flatten() {
            let kind = match e.file_type() {
                Ok(t) if t.is_dir() => FileType::Directory,
                Ok(t) if t.is_symlink() => FileType::Symlink,
                _ => FileType::RegularFile,
            };
            let child = rel.join(e.file_name());
            entries.push((s.ino_for(&child), kind, e.file_name()));
        }
        for (i, (child, kind, name)) in entries.into_iter().enumerate().skip(offset as usize) {
            if reply.add(child, (i + 1) as i64, kind, &name) {
                break;
            }
        }
        reply.ok();
    }

    fn statfs(&mut self, _req: &Request<'_>, _ino: u64, reply: ReplyStatfs) {
        let s = self.state();
        let path = tri!(
            reply,
            CString::new(s.backing.as_os_str().as_bytes()).map_err(|_| libc::EINVAL)
        );
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: a valid C string and a zeroed statvfs for the kernel to fill.
        if unsafe { libc::statvfs(path.as_ptr(), &mut st) } != 0 {
            return reply.error(errno(io::Error::last_os_error()));
        }
        reply.statfs(
            st.f_blocks,
            st.f_bfree,
            st.f_bavail,
            st.f_files,
            st.f_ffree,
            st.f_bsize as u32,
            st.f_namemax as u32,
            st.f_frsize as u32,
        );
    }
}

/// A mounted lossy file system; unmounted on drop.
pub struct LossyFs {
    state: Arc<Mutex<State>>,
    mountpoint: PathBuf,
    session: Option<BackgroundSession>,
}

impl LossyFs {
    /// Serves `backing` (an existing directory) at `mountpoint` (an existing, empty one).
    pub fn mount(backing: &Path, mountpoint: &Path) -> io::Result<LossyFs> {
        let mut state = State {
            backing: backing.to_path_buf(),
            next_ino: fuser::FUSE_ROOT_ID + 1,
            ..State::default()
        };
        state.paths.insert(fuser::FUSE_ROOT_ID, PathBuf::new());
        state.inodes.insert(PathBuf::new(), fuser::FUSE_ROOT_ID);
        let state = Arc::new(Mutex::new(state));
        let options = [MountOption::FSName("folio-lossyfs".into()), MountOption::RW];
        let session =
            fuser::spawn_mount2(Fs(Arc::clone(&state)), mountpoint, &options).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!(
                        "cannot mount a FUSE file system at {} (needs /dev/fuse and root): {e}",
                        mountpoint.display()
                    ),
                )
            })?;
        Ok(LossyFs {
            state,
            mountpoint: mountpoint.to_path_buf(),
            session: Some(session),
        })
    }

    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// Power loss: every write and size change not yet fsynced is gone. Kill the
    /// processes using the mount first.
    pub fn cut_power(&self) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let dropped: u64 = s.pending.values().map(|p| p.pages.len() as u64).sum();
        s.pending.clear();
        s.stats.pages_dropped += dropped;
        s.stats.cuts += 1;
    }

    pub fn stats(&self) -> LossyStats {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).stats
    }
}

impl Drop for LossyFs {
    fn drop(&mut self) {
        // Joins the session thread after unmounting.
        drop(self.session.take());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn mounted() -> Option<(tempfile::TempDir, LossyFs)> {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir(t.path().join("b")).unwrap();
        std::fs::create_dir(t.path().join("m")).unwrap();
        match LossyFs::mount(&t.path().join("b"), &t.path().join("m")) {
            Ok(fs) => Some((t, fs)),
            Err(e) if !Path::new("/dev/fuse").exists() => {
                panic!("no /dev/fuse on this machine: {e}")
            }
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn unsynced_writes_are_lost_at_a_cut_and_synced_ones_kept() {
        let (_t, fs) = mounted().unwrap();
        let m = fs.mountpoint().to_path_buf();
        let mut f = File::create(m.join("a")).unwrap();
        f.write_all(b"durable").unwrap();
        f.sync_data().unwrap();
        f.write_all(b" and lost").unwrap();
        assert_eq!(std::fs::read(m.join("a")).unwrap(), b"durable and lost");
        let mut g = File::create(m.join("never-synced")).unwrap();
        g.write_all(&[7u8; 10_000]).unwrap();
        drop((f, g));
        fs.cut_power();
        assert_eq!(std::fs::read(m.join("a")).unwrap(), b"durable");
        assert_eq!(std::fs::read(m.join("never-synced")).unwrap(), b"");
        assert!(fs.stats().pages_dropped >= 3, "{:?}", fs.stats());
    }

    #[test]
    fn overwrites_truncations_and_renames_read_back_and_sync() {
        let (t, fs) = mounted().unwrap();
        let m = fs.mountpoint().to_path_buf();
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(m.join("x"))
            .unwrap();
        let data: Vec<u8> = (0..20_000u32).map(|i| i as u8).collect();
        f.write_all_at(&data, 0).unwrap();
        f.sync_all().unwrap();
        f.write_all_at(b"ZZ", 4095).unwrap();
        f.set_len(10_000).unwrap();
        f.set_len(12_000).unwrap();
        let mut want = data[..10_000].to_vec();
        want[4095..4097].copy_from_slice(b"ZZ");
        want.resize(12_000, 0);
        assert_eq!(std::fs::read(m.join("x")).unwrap(), want);
        std::fs::create_dir(m.join("d")).unwrap();
        std::fs::rename(m.join("x"), m.join("d/y")).unwrap();
        assert_eq!(std::fs::read(m.join("d/y")).unwrap(), want);
        f.sync_data().unwrap();
        fs.cut_power();
        assert_eq!(std::fs::read(m.join("d/y")).unwrap(), want);
        assert_eq!(std::fs::read(t.path().join("b/d/y")).unwrap(), want);
    }
}
