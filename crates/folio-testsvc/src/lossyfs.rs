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
//! Directory operations (create, mkdir, rename, unlink, rmdir) are lost the same way: each
//! is applied to `backing` at once (an unlinked or replaced file kept aside in a trash
//! directory next to `backing`), and is durable only once every directory it changed was
//! fsynced after it; a cut undoes the others, newest first (a file created and fsynced
//! but whose directory never was is gone; a removed file comes back). That is POSIX's
//! rule, stricter than ext4's ordered journal (where any fsync commits every earlier
//! directory operation), so a bookie must fsync the directories it changes.
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
    /// Directory operations undone by power cuts (never fsynced in their directory).
    pub dir_ops_undone: u64,
}

/// How to undo a directory operation at a cut. Paths are relative to `backing`; trash
/// paths are absolute (outside the mount).
#[derive(Debug)]
enum Undo {
    /// A file created: remove it.
    Create(PathBuf),
    /// A directory created: remove it and what is in it.
    Mkdir(PathBuf),
    /// A file unlinked (kept in the trash): put it back.
    Unlink(PathBuf, PathBuf),
    /// An empty directory removed: create it again.
    Rmdir(PathBuf),
    /// A rename: move it back, and put back what it replaced (kept in the trash).
    Rename {
        from: PathBuf,
        to: PathBuf,
        replaced: Option<PathBuf>,
    },
}

/// A directory operation not yet durable.
#[derive(Debug)]
struct DirOp {
    seq: u64,
    /// The directories it changed: durable once each was fsynced after it.
    dirs: Vec<PathBuf>,
    undo: Undo,
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
    /// Directory operations not yet durable, oldest first.
    dir_ops: Vec<DirOp>,
    /// Per directory, the sequence number of its last fsync.
    dir_synced: HashMap<PathBuf, u64>,
    next_seq: u64,
    /// Where unlinked and replaced files wait until their removal is durable.
    trash: PathBuf,
    next_trash: u64,
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

    /// Records a directory operation that changed `dirs`.
    fn log_dir_op(&mut self, dirs: Vec<PathBuf>, undo: Undo) {
        self.next_seq += 1;
        self.dir_ops.push(DirOp {
            seq: self.next_seq,
            dirs,
            undo,
        });
    }

    /// Moves the file or empty directory at `rel` into the trash; returns where.
    fn move_to_trash(&mut self, rel: &Path) -> io::Result<PathBuf> {
        std::fs::create_dir_all(&self.trash)?;
        self.next_trash += 1;
        let at = self.trash.join(self.next_trash.to_string());
        std::fs::rename(self.full(rel), &at)?;
        Ok(at)
    }

    /// An fsync of directory `dir`: every operation whose directories are all synced
    /// after it is durable (its trash emptied).
    fn sync_dir(&mut self, dir: &Path) {
        self.next_seq += 1;
        self.dir_synced.insert(dir.to_path_buf(), self.next_seq);
        let synced = &self.dir_synced;
        let (durable, pending): (Vec<DirOp>, Vec<DirOp>) = std::mem::take(&mut self.dir_ops)
            .into_iter()
            .partition(|op| {
                op.dirs
                    .iter()
                    .all(|d| synced.get(d).is_some_and(|&s| s > op.seq))
            });
        self.dir_ops = pending;
        for op in durable {
            match op.undo {
                Undo::Unlink(_, trash)
                | Undo::Rename {
                    replaced: Some(trash),
                    ..
                } => {
                    let _ = std::fs::remove_file(&trash).or_else(|_| std::fs::remove_dir(&trash));
                }
                _ => {}
            }
        }
    }

    /// Moves the inode numbers of everything at or under `from` to `to`.
    fn move_paths(&mut self, from: &Path, to: &Path) {
        let moved: Vec<(PathBuf, u64)> = self
            .inodes
            .iter()
            .filter(|(p, _)| p.starts_with(from))
            .map(|(p, &i)| (p.clone(), i))
            .collect();
        for (old, i) in moved {
            let under = old.strip_prefix(from).expect("filtered by prefix");
            // (Joining an empty path would append a '/'.)
            let new = if under.as_os_str().is_empty() {
                to.to_path_buf()
            } else {
                to.join(under)
            };
            self.inodes.remove(&old);
            self.inodes.insert(new.clone(), i);
            self.paths.insert(i, new);
        }
    }

    /// Forgets the inodes at or under `rel` (removed by an undo).
    fn forget_tree(&mut self, rel: &Path) {
        let gone: Vec<PathBuf> = self
            .inodes
            .keys()
            .filter(|p| p.starts_with(rel))
            .cloned()
            .collect();
        for p in gone {
            self.forget_path(&p);
        }
    }

    /// Undoes every directory operation not yet durable, newest first.
    fn undo_dir_ops(&mut self) -> io::Result<u64> {
        let ops = std::mem::take(&mut self.dir_ops);
        let n = ops.len() as u64;
        for op in ops.into_iter().rev() {
            match op.undo {
                Undo::Create(rel) => {
                    let _ = std::fs::remove_file(self.full(&rel));
                    self.forget_path(&rel);
                }
                Undo::Mkdir(rel) => {
                    let _ = std::fs::remove_dir_all(self.full(&rel));
                    self.forget_tree(&rel);
                }
                Undo::Unlink(rel, trash) => std::fs::rename(trash, self.full(&rel))?,
                Undo::Rmdir(rel) => std::fs::create_dir(self.full(&rel))?,
                Undo::Rename { from, to, replaced } => {
                    std::fs::rename(self.full(&to), self.full(&from))?;
                    self.move_paths(&to, &from);
                    if let Some(trash) = replaced {
                        std::fs::rename(trash, self.full(&to))?;
                    }
                }
            }
        }
        Ok(n)
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

/// The directory holding `rel` ("" for the root).
fn parent_of(rel: &Path) -> PathBuf {
    rel.parent().map(Path::to_path_buf).unwrap_or_default()
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
        s.log_dir_op(vec![parent_of(&rel)], Undo::Mkdir(rel.clone()));
        let attr = tri!(reply, s.attr(&rel));
        reply.entry(&TTL, &attr, 0);
    }

    fn unlink(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEmpty) {
        let mut s = self.state();
        let rel = tri!(reply, s.child(parent, name));
        if std::fs::symlink_metadata(s.full(&rel)).is_ok_and(|m| m.is_dir()) {
            return reply.error(libc::EISDIR);
        }
        // Its pending data is lost with it; its synced bytes wait in the trash.
        let trash = tri!(reply, s.move_to_trash(&rel).map_err(errno));
        s.forget_path(&rel);
        s.log_dir_op(vec![parent_of(&rel)], Undo::Unlink(rel, trash));
        reply.ok();
    }

    fn rmdir(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEmpty) {
        let mut s = self.state();
        let rel = tri!(reply, s.child(parent, name));
        tri!(reply, std::fs::remove_dir(s.full(&rel)).map_err(errno));
        s.forget_path(&rel);
        s.log_dir_op(vec![parent_of(&rel)], Undo::Rmdir(rel));
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
        // What is at `to` is replaced: kept in the trash until the rename is durable.
        let replaced = match std::fs::symlink_metadata(s.full(&to)) {
            Ok(_) if from == to => None,
            Ok(_) => Some(tri!(reply, s.move_to_trash(&to).map_err(errno))),
            Err(_) => None,
        };
        if let Err(e) = std::fs::rename(s.full(&from), s.full(&to)) {
            if let Some(t) = &replaced {
                let _ = std::fs::rename(t, s.full(&to));
            }
            return reply.error(errno(e));
        }
        // What was at `to` is gone; everything at or under `from` moves to `to`.
        s.forget_path(&to);
        s.move_paths(&from, &to);
        let mut dirs = vec![parent_of(&from)];
        if parent_of(&to) != dirs[0] {
            dirs.push(parent_of(&to));
        }
        s.log_dir_op(dirs, Undo::Rename { from, to, replaced });
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
        let existed = std::fs::symlink_metadata(s.full(&rel)).is_ok();
        let mut o = OpenOptions::new();
        o.write(true).create(true);
        if flags & libc::O_EXCL != 0 {
            o.create_new(true);
        }
        tri!(reply, o.open(s.full(&rel)).map_err(errno));
        if !existed {
            s.log_dir_op(vec![parent_of(&rel)], Undo::Create(rel.clone()));
        }
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

    fn fsyncdir(&mut self, _req: &Request<'_>, ino: u64, _fh: u64, _ds: bool, reply: ReplyEmpty) {
        let mut s = self.state();
        let rel = tri!(reply, s.path_of(ino));
        s.stats.fsyncs += 1;
        s.sync_dir(&rel);
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
        let mut name = backing.file_name().unwrap_or_default().to_os_string();
        name.push(".lossyfs-trash");
        let mut state = State {
            backing: backing.to_path_buf(),
            next_ino: fuser::FUSE_ROOT_ID + 1,
            trash: backing.with_file_name(name),
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
        match s.undo_dir_ops() {
            Ok(n) => s.stats.dir_ops_undone += n,
            Err(e) => panic!("lossyfs: undoing directory operations at a cut: {e}"),
        }
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
        // Both directory entries durable: only data is lost here.
        File::open(&m).unwrap().sync_all().unwrap();
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
        // The create, the mkdir and the rename are durable once both directories are.
        File::open(&m).unwrap().sync_all().unwrap();
        File::open(m.join("d")).unwrap().sync_all().unwrap();
        fs.cut_power();
        assert_eq!(std::fs::read(m.join("d/y")).unwrap(), want);
        assert_eq!(std::fs::read(t.path().join("b/d/y")).unwrap(), want);
        assert_eq!(fs.stats().dir_ops_undone, 0);
    }

    #[test]
    fn directory_operations_not_fsynced_in_their_directory_are_undone_at_a_cut() {
        let (t, fs) = mounted().unwrap();
        let m = fs.mountpoint().to_path_buf();
        let sync_dir = |d: &Path| File::open(d).unwrap().sync_all().unwrap();
        std::fs::create_dir(m.join("d")).unwrap();
        sync_dir(&m);
        // Durable: a file whose data and directory entry were both synced.
        let mut kept = File::create(m.join("d/kept")).unwrap();
        kept.write_all(b"kept").unwrap();
        kept.sync_all().unwrap();
        sync_dir(&m.join("d"));
        // Its data synced, its directory entry not: gone after the cut.
        let mut orphan = File::create(m.join("d/orphan")).unwrap();
        orphan.write_all(b"orphan").unwrap();
        orphan.sync_all().unwrap();
        // Removed and renamed without a directory sync: back as they were.
        std::fs::remove_file(m.join("d/kept")).unwrap();
        let mut other = File::create(m.join("other")).unwrap();
        other.write_all(b"other").unwrap();
        other.sync_all().unwrap();
        sync_dir(&m);
        std::fs::rename(m.join("other"), m.join("d/moved")).unwrap();
        std::fs::create_dir(m.join("d/sub")).unwrap();
        File::create(m.join("d/sub/deep"))
            .unwrap()
            .sync_all()
            .unwrap();
        sync_dir(&m.join("d/sub"));
        assert!(!m.join("d/kept").exists() && m.join("d/moved").exists());
        drop((kept, orphan, other));
        fs.cut_power();
        assert_eq!(std::fs::read(m.join("d/kept")).unwrap(), b"kept");
        assert!(!m.join("d/orphan").exists(), "an unsynced create survived");
        assert_eq!(std::fs::read(m.join("other")).unwrap(), b"other");
        assert!(!m.join("d/moved").exists(), "an unsynced rename survived");
        assert!(!m.join("d/sub").exists(), "an unsynced mkdir survived");
        // The create of d/orphan, the unlink, the rename and the mkdir of d/sub (d/sub/deep
        // was durable in its directory, but that directory goes).
        assert_eq!(fs.stats().dir_ops_undone, 4, "{:?}", fs.stats());
        // The trash (outside the mount) is empty once nothing waits in it.
        let trash = t.path().join("b.lossyfs-trash");
        assert_eq!(std::fs::read_dir(&trash).map_or(0, |d| d.count()), 0);
    }

    /// folio-env's `create_dir_all` makes what it creates durable (each directory synced
    /// into its parent, and the deepest existing one too), so a bookie's directories and
    /// cookies survive a power loss right after its first start; `std::fs::create_dir_all`
    /// does not, which this file system shows.
    #[test]
    fn the_seams_create_dir_all_survives_a_cut_and_std_s_does_not() {
        use folio_env::FileSystem as _;
        let (_t, fs) = mounted().unwrap();
        let m = fs.mountpoint().to_path_buf();
        std::fs::create_dir(m.join("data")).unwrap();
        folio_env::RealFileSystem
            .create_dir_all(&m.join("data/journal/current"))
            .unwrap();
        std::fs::create_dir_all(m.join("other/journal/current")).unwrap();
        fs.cut_power();
        assert!(m.join("data/journal/current").is_dir());
        assert!(!m.join("other").exists());
    }
}
