//! The file system seam: positional reads and writes, explicit durability.
//!
//! Files are written with positional writes (`pwrite`) so that a writer keeps its own
//! offset and readers can read concurrently without seeking. Durability is explicit:
//! nothing written is durable until `sync_data` (fdatasync) returns `Ok`, and a
//! directory entry (a created, renamed or removed file) is durable only after
//! `sync_dir` on its parent. The simulated disk holds the storage engine to exactly
//! these rules.

use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// How to open a file. Reads are always allowed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpenOptions {
    pub write: bool,
    /// Create the file if it does not exist.
    pub create: bool,
    /// Fail if the file exists (implies `create`).
    pub create_new: bool,
    pub truncate: bool,
    /// Bypass the page cache (`O_DIRECT`): every read and write must then be aligned
    /// to [`crate::DIRECT_IO_ALIGN`] in address, offset and length, or fails with
    /// EINVAL (the simulated disk checks the same). Not every file system supports it
    /// (tmpfs refuses the open with EINVAL); callers fall back to buffered I/O.
    pub direct: bool,
}

impl OpenOptions {
    /// Open an existing file for reading.
    pub fn read() -> Self {
        OpenOptions::default()
    }

    /// Open for reading and writing, creating the file if missing.
    pub fn write_create() -> Self {
        OpenOptions {
            write: true,
            create: true,
            ..Default::default()
        }
    }

    /// Create a new file; fail if it exists.
    pub fn create_new() -> Self {
        OpenOptions {
            write: true,
            create_new: true,
            ..Default::default()
        }
    }

    /// The same options with direct I/O on or off.
    pub fn direct(self, direct: bool) -> Self {
        OpenOptions { direct, ..self }
    }
}

/// Free and total bytes of the file system holding a directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiskSpace {
    pub free: u64,
    pub total: u64,
}

/// A held exclusive lock (see [`FileSystem::lock_exclusive`]); dropping it releases
/// the lock.
pub type FileLock = Box<dyn std::any::Any + Send + Sync>;

/// An open file.
#[allow(clippy::len_without_is_empty)] // a file's emptiness is never the question; its length is
pub trait File: Send + Sync {
    /// Reads up to `buf.len()` bytes at `offset`; returns how many were read (0 at end).
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;
    /// [`File::read_at`] only if it cannot block on the device: Linux's `preadv2` with
    /// `RWF_NOWAIT`, which reads what the page cache holds and fails with `WouldBlock`
    /// where it would have to wait for the disk. It may read less than asked (the rest is
    /// not cached). For a bookie serving a read on the connection's own task, leaving the
    /// read threads the reads that go to the disk. Files without such a call always fail
    /// with `WouldBlock`: a caller then takes the blocking path.
    fn read_at_nowait(&self, _buf: &mut [u8], _offset: u64) -> io::Result<usize> {
        Err(io::ErrorKind::WouldBlock.into())
    }
    /// [`File::read_at`] of up to `len` bytes onto the end of `buf`; returns how many were
    /// read. The bytes land in `buf`'s spare capacity, which nothing zeroes first: a bookie
    /// reading 128 KiB runs ahead for catch-up reads spent 3% of its CPU zeroing buffers
    /// the read then overwrote. Files without such a call zero and read.
    fn read_at_append(&self, buf: &mut Vec<u8>, len: usize, offset: u64) -> io::Result<usize> {
        append_with(buf, len, |b| self.read_at(b, offset))
    }
    /// [`File::read_at_nowait`] onto the end of `buf`, as [`File::read_at_append`] reads.
    fn read_at_nowait_append(
        &self,
        buf: &mut Vec<u8>,
        len: usize,
        offset: u64,
    ) -> io::Result<usize> {
        append_with(buf, len, |b| self.read_at_nowait(b, offset))
    }
    /// Writes all of `buf` at `offset`.
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
    /// Writes `bufs` back to back from `offset`, as `pwritev` does: one system call for
    /// many buffers, none of them copied into one. Files without it write each in turn
    /// (the simulated disk: a crash may then keep any prefix of the buffers, which a
    /// torn `pwritev` may too).
    fn write_all_vectored_at(&self, bufs: &[&[u8]], mut offset: u64) -> io::Result<()> {
        for b in bufs {
            self.write_all_at(b, offset)?;
            offset += b.len() as u64;
        }
        Ok(())
    }
    /// Makes the file's data (and the metadata needed to read it) durable: fdatasync.
    fn sync_data(&self) -> io::Result<()>;
    /// The file's current length.
    fn len(&self) -> io::Result<u64>;
    /// Truncates or extends the file.
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// Reserves space for `len` bytes from offset 0 without changing the visible
    /// length where the platform allows it (fallocate with KEEP_SIZE); best effort.
    fn allocate(&self, len: u64) -> io::Result<()>;
    /// Writes the range's dirty pages to the device and waits for them (Linux's
    /// `sync_file_range` with WAIT_BEFORE | WRITE | WAIT_AFTER). **Not a durability
    /// barrier**: no metadata, no device cache flush; only `sync_data` is. Large writers
    /// call it every MiB or so, so that their data reaches the device in small
    /// pieces instead of one burst at `sync_data`, which would queue the journal's small
    /// writes behind it. Files without such a call do nothing.
    fn write_back(&self, _offset: u64, _len: u64) -> io::Result<()> {
        Ok(())
    }
    /// Starts writing the range's dirty pages to the device without waiting
    /// (`sync_file_range` with WRITE only). Not a durability barrier either: it only lets
    /// the device work on the range before a later `sync_data` needs it.
    fn start_write_back(&self, _offset: u64, _len: u64) -> io::Result<()> {
        Ok(())
    }
    /// Tells the kernel the range's cached pages will not be read again
    /// (`posix_fadvise` DONTNEED): clean pages are dropped from the page cache. For data
    /// written once and read only after a crash (the journal), so that it does not crowd
    /// out the page cache. Files without such a call do nothing.
    fn drop_cache(&self, _offset: u64, _len: u64) -> io::Result<()> {
        Ok(())
    }

    /// Reads exactly `buf.len()` bytes at `offset`, or fails with `UnexpectedEof`.
    fn read_exact_at(&self, mut buf: &mut [u8], mut offset: u64) -> io::Result<()> {
        while !buf.is_empty() {
            match self.read_at(buf, offset) {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        format!("short read at offset {offset}"),
                    ));
                }
                Ok(n) => {
                    buf = &mut buf[n..];
                    offset += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// A file system.
pub trait FileSystem: Send + Sync + 'static {
    fn open(&self, path: &Path, opts: OpenOptions) -> io::Result<Arc<dyn File>>;
    /// Creates the directory and its missing parents, durably: each directory created is
    /// synced into its parent, and so is the deepest one that already existed (made by an
    /// operator, or by a run that crashed, just before). Without that a power loss after
    /// a bookie's first start can take a directory, and the cookie in it, away.
    fn create_dir_all(&self, path: &Path) -> io::Result<()>;
    /// The names (not paths) of the entries of a directory, sorted.
    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>>;
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// Atomically replaces `to` with `from`.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    fn exists(&self, path: &Path) -> bool;
    /// Makes the directory's entries (creations, renames, removals) durable.
    fn sync_dir(&self, path: &Path) -> io::Result<()>;
    /// Free and total space of the file system holding `path`.
    fn space(&self, path: &Path) -> io::Result<DiskSpace>;
    /// Takes an exclusive lock on the file at `path` (created if missing, contents
    /// untouched) without waiting: fails with `WouldBlock` while any other holder, in
    /// this process or another, has it. Held until the returned value is dropped (or
    /// the process dies), so a second bookie cannot open directories in use.
    fn lock_exclusive(&self, path: &Path) -> io::Result<FileLock>;

    /// Reads a whole file.
    fn read_file(&self, path: &Path) -> io::Result<Vec<u8>> {
        let f = self.open(path, OpenOptions::read())?;
        let len = f.len()? as usize;
        let mut buf = vec![0; len];
        f.read_exact_at(&mut buf, 0)?;
        Ok(buf)
    }

    /// Durably replaces the file at `path` with `data`: write a temporary file, sync it,
    /// rename it over `path`, sync the directory. A crash leaves the old or the new
    /// contents, never a mix.
    fn write_file_atomic(&self, path: &Path, data: &[u8]) -> io::Result<()> {
        let tmp = tmp_path(path);
        let f = self.open(
            &tmp,
            OpenOptions {
                write: true,
                create: true,
                truncate: true,
                ..Default::default()
            },
        )?;
        f.write_all_at(data, 0)?;
        f.set_len(data.len() as u64)?;
        f.sync_data()?;
        drop(f);
        self.rename(&tmp, path)?;
        self.sync_dir(path.parent().unwrap_or(Path::new(".")))
    }
}

fn tmp_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".tmp");
    path.with_file_name(name)
}

/// Linux's `sync_file_range(2)` on `file`; a range beyond `i64` does nothing.
#[cfg(target_os = "linux")]
fn sync_file_range(file: &std::fs::File, offset: u64, len: u64, flags: u32) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let (Ok(offset), Ok(len)) = (i64::try_from(offset), i64::try_from(len)) else {
        return Ok(());
    };
    // SAFETY: the descriptor belongs to `file`, which is borrowed (so open) for the whole
    // call; the call touches no memory of ours.
    let r = unsafe { libc::sync_file_range(file.as_raw_fd(), offset, len, flags) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Zeroes `len` bytes at the end of `buf`, lets `read` fill them, and keeps what it read.
fn append_with(
    buf: &mut Vec<u8>,
    len: usize,
    read: impl FnOnce(&mut [u8]) -> io::Result<usize>,
) -> io::Result<usize> {
    let start = buf.len();
    buf.resize(start + len, 0);
    let r = read(&mut buf[start..]);
    buf.truncate(start + *r.as_ref().unwrap_or(&0));
    r
}

/// `preadv2` of up to `len` bytes at `offset` into `buf`'s spare capacity, which becomes
/// part of `buf` as far as the kernel filled it.
fn preadv2_append(
    file: &std::fs::File,
    buf: &mut Vec<u8>,
    len: usize,
    offset: u64,
    flags: libc::c_int,
) -> io::Result<usize> {
    use std::os::fd::AsRawFd;
    let offset = libc::off_t::try_from(offset)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "offset past off_t"))?;
    buf.reserve(len);
    let start = buf.len();
    let iov = libc::iovec {
        iov_base: buf.spare_capacity_mut().as_mut_ptr().cast(),
        iov_len: len,
    };
    // SAFETY: the iovec points at `len` bytes of `buf`'s spare capacity (reserved above),
    // which nothing else borrows during the call; the kernel writes at most `len` bytes
    // there and returns how many.
    let n = unsafe { libc::preadv2(file.as_raw_fd(), &iov, 1, offset, flags) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let n = n as usize;
    // SAFETY: the kernel initialised the first `n <= len` bytes of the spare capacity.
    unsafe { buf.set_len(start + n) };
    Ok(n)
}

/// The operating system's file system.
#[derive(Debug, Default, Clone, Copy)]
pub struct RealFileSystem;

struct RealFile(std::fs::File);

impl File for RealFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.0.read_at(buf, offset)
    }

    fn read_at_nowait(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let mut bufs = [io::IoSliceMut::new(buf)];
        match rustix::io::preadv2(
            &self.0,
            &mut bufs,
            offset,
            rustix::io::ReadWriteFlags::NOWAIT,
        ) {
            Ok(n) => Ok(n),
            // EAGAIN: not in the page cache. EOPNOTSUPP: a file system without RWF_NOWAIT
            // for buffered reads. Either way the caller takes the blocking path.
            Err(rustix::io::Errno::AGAIN) | Err(rustix::io::Errno::OPNOTSUPP) => {
                Err(io::ErrorKind::WouldBlock.into())
            }
            Err(e) => Err(e.into()),
        }
    }

    fn read_at_append(&self, buf: &mut Vec<u8>, len: usize, offset: u64) -> io::Result<usize> {
        loop {
            match preadv2_append(&self.0, buf, len, offset, 0) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                r => return r,
            }
        }
    }

    fn read_at_nowait_append(
        &self,
        buf: &mut Vec<u8>,
        len: usize,
        offset: u64,
    ) -> io::Result<usize> {
        match preadv2_append(&self.0, buf, len, offset, libc::RWF_NOWAIT) {
            // EAGAIN: not in the page cache. EOPNOTSUPP: a file system without RWF_NOWAIT
            // for buffered reads. Either way the caller takes the blocking path.
            Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN | libc::EOPNOTSUPP)) => {
                Err(io::ErrorKind::WouldBlock.into())
            }
            r => r,
        }
    }

    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.0.write_all_at(buf, offset)
    }

    fn write_all_vectored_at(&self, bufs: &[&[u8]], mut offset: u64) -> io::Result<()> {
        // pwritev takes at most IOV_MAX (1024) buffers and may write less than asked.
        let mut slices: Vec<io::IoSlice<'_>> = bufs
            .iter()
            .filter(|b| !b.is_empty())
            .map(|b| io::IoSlice::new(b))
            .collect();
        let mut rest: &mut [io::IoSlice<'_>] = &mut slices;
        while !rest.is_empty() {
            let n = rest.len().min(1024);
            let wrote = match rustix::io::pwritev(&self.0, &rest[..n], offset) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(w) => w,
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            };
            offset += wrote as u64;
            io::IoSlice::advance_slices(&mut rest, wrote);
        }
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        rustix::fs::fdatasync(&self.0).map_err(io::Error::from)
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }

    #[cfg(target_os = "linux")]
    fn write_back(&self, offset: u64, len: u64) -> io::Result<()> {
        sync_file_range(
            &self.0,
            offset,
            len,
            libc::SYNC_FILE_RANGE_WAIT_BEFORE
                | libc::SYNC_FILE_RANGE_WRITE
                | libc::SYNC_FILE_RANGE_WAIT_AFTER,
        )
    }

    #[cfg(target_os = "linux")]
    fn start_write_back(&self, offset: u64, len: u64) -> io::Result<()> {
        sync_file_range(&self.0, offset, len, libc::SYNC_FILE_RANGE_WRITE)
    }

    fn drop_cache(&self, offset: u64, len: u64) -> io::Result<()> {
        let Some(len) = std::num::NonZeroU64::new(len) else {
            return Ok(());
        };
        rustix::fs::fadvise(&self.0, offset, Some(len), rustix::fs::Advice::DontNeed)
            .map_err(io::Error::from)
    }

    fn allocate(&self, len: u64) -> io::Result<()> {
        match rustix::fs::fallocate(&self.0, rustix::fs::FallocateFlags::KEEP_SIZE, 0, len) {
            Ok(()) => Ok(()),
            // Not every file system supports fallocate; preallocation is only an optimisation.
            Err(rustix::io::Errno::OPNOTSUPP) | Err(rustix::io::Errno::NOSYS) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

impl FileSystem for RealFileSystem {
    fn open(&self, path: &Path, opts: OpenOptions) -> io::Result<Arc<dyn File>> {
        let mut o = std::fs::OpenOptions::new();
        #[cfg(target_os = "linux")]
        if opts.direct {
            use std::os::unix::fs::OpenOptionsExt;
            o.custom_flags(libc::O_DIRECT);
        }
        let f = o
            .read(true)
            .write(opts.write || opts.create || opts.create_new || opts.truncate)
            .create(opts.create)
            .create_new(opts.create_new)
            .truncate(opts.truncate)
            .open(path)
            .map_err(|e| annotate(e, "open", path))?;
        Ok(Arc::new(RealFile(f)))
    }

    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        let parent_of = |d: &Path| -> PathBuf {
            match d.parent() {
                Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
                _ => PathBuf::from("."),
            }
        };
        // The missing directories, deepest first.
        let mut missing = Vec::new();
        let mut at = path;
        while !at.is_dir() {
            missing.push(at.to_path_buf());
            match at.parent() {
                Some(p) if !p.as_os_str().is_empty() => at = p,
                _ => break,
            }
        }
        // The deepest directory that exists may itself be new (made by an operator or a
        // previous run just before a crash): its entry is synced into its parent too, if
        // that parent can be opened (it is not ours: a parent we may not read is left).
        let _ = self.sync_dir(&parent_of(at));
        for d in missing.iter().rev() {
            match std::fs::create_dir(d) {
                Ok(()) => {}
                // Created meanwhile by someone else: theirs to make durable, but synced
                // below all the same.
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && d.is_dir() => {}
                Err(e) => return Err(annotate(e, "create directory", d)),
            }
            self.sync_dir(&parent_of(d))?;
        }
        Ok(())
    }

    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(path).map_err(|e| annotate(e, "list", path))? {
            names.push(entry?.file_name().to_string_lossy().into_owned());
        }
        names.sort();
        Ok(names)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path).map_err(|e| annotate(e, "remove", path))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to).map_err(|e| annotate(e, "rename", from))
    }

    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        let d = std::fs::File::open(path).map_err(|e| annotate(e, "open directory", path))?;
        rustix::fs::fsync(&d).map_err(io::Error::from)
    }

    fn lock_exclusive(&self, path: &Path) -> io::Result<FileLock> {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| annotate(e, "open lock file", path))?;
        // flock, not fcntl: an flock lock belongs to the open file description, so a
        // second open in the same process conflicts too (fcntl locks would not), and
        // the kernel drops it when the process dies.
        rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockExclusive).map_err(
            |e| {
                let e = io::Error::from(e);
                annotate(e, "lock", path)
            },
        )?;
        Ok(Box::new(f))
    }

    fn space(&self, path: &Path) -> io::Result<DiskSpace> {
        let st = rustix::fs::statvfs(path).map_err(|e| annotate(e.into(), "statvfs", path))?;
        Ok(DiskSpace {
            free: st.f_bavail.saturating_mul(st.f_frsize),
            total: st.f_blocks.saturating_mul(st.f_frsize),
        })
    }
}

/// Keeps the error kind (callers match on it) and adds the operation and path to the
/// message, so that "No space left on device" arrives naming the directory.
fn annotate(e: io::Error, op: &str, path: &Path) -> io::Error {
    io::Error::new(e.kind(), format!("{op} {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_that_cannot_block_reads_the_page_cache_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a");
        let f = RealFileSystem.open(&p, OpenOptions::create_new()).unwrap();
        let data: Vec<u8> = (0..16384u32).map(|i| (i % 251) as u8).collect();
        f.write_all_at(&data, 0).unwrap();
        f.sync_data().unwrap();
        // Just written: in the page cache.
        let mut buf = vec![0u8; 8192];
        let n = f.read_at_nowait(&mut buf, 4096).unwrap();
        assert!(n > 0);
        assert_eq!(&buf[..n], &data[4096..4096 + n]);
        // Clean pages dropped from the page cache: the read would wait for the disk. Only
        // file systems with a page cache of their own drop them (tmpfs keeps its pages), so
        // the refusal is required where the test's directory is on ext4.
        f.drop_cache(0, data.len() as u64).unwrap();
        let on_ext4 =
            rustix::fs::fstatfs(std::fs::File::open(&p).unwrap()).is_ok_and(|s| s.f_type == 0xEF53);
        match f.read_at_nowait(&mut buf, 4096) {
            Err(e) => assert_eq!(e.kind(), io::ErrorKind::WouldBlock),
            Ok(n) => {
                assert!(!on_ext4, "an evicted page was read without waiting on ext4");
                assert_eq!(&buf[..n], &data[4096..4096 + n]);
            }
        }
        // The blocking read still reads it.
        f.read_exact_at(&mut buf, 4096).unwrap();
        assert_eq!(&buf[..], &data[4096..4096 + 8192]);
    }

    #[test]
    fn reads_appended_to_a_buffer_keep_its_bytes_and_stop_at_the_bound_and_the_end() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a");
        let f = RealFileSystem.open(&p, OpenOptions::create_new()).unwrap();
        let data: Vec<u8> = (0..10000u32).map(|i| (i % 251) as u8).collect();
        f.write_all_at(&data, 0).unwrap();
        for nowait in [false, true] {
            let read = |buf: &mut Vec<u8>, len, off| {
                if nowait {
                    f.read_at_nowait_append(buf, len, off)
                } else {
                    f.read_at_append(buf, len, off)
                }
            };
            // Capacity far past the bound: no more than `len` is read.
            let mut buf = Vec::with_capacity(1 << 20);
            buf.extend_from_slice(b"head");
            assert_eq!(read(&mut buf, 3000, 100).unwrap(), 3000);
            assert_eq!(&buf[..4], b"head");
            assert_eq!(&buf[4..], &data[100..3100]);
            // Past the end of the file: what there is, then nothing.
            assert_eq!(read(&mut buf, 5000, 8000).unwrap(), 2000);
            assert_eq!(&buf[3004..], &data[8000..]);
            assert_eq!(read(&mut buf, 10, 10000).unwrap(), 0);
            assert_eq!(buf.len(), 5004);
        }
        // The default (zeroing) versions agree.
        struct Plain<'a>(&'a dyn File);
        impl File for Plain<'_> {
            fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
                self.0.read_at(buf, offset)
            }
            fn write_all_at(&self, _: &[u8], _: u64) -> io::Result<()> {
                unreachable!()
            }
            fn sync_data(&self) -> io::Result<()> {
                unreachable!()
            }
            fn len(&self) -> io::Result<u64> {
                self.0.len()
            }
            fn set_len(&self, _: u64) -> io::Result<()> {
                unreachable!()
            }
            fn allocate(&self, _: u64) -> io::Result<()> {
                unreachable!()
            }
        }
        let mut buf = b"x".to_vec();
        assert_eq!(
            Plain(&*f).read_at_append(&mut buf, 3000, 9000).unwrap(),
            1000
        );
        assert_eq!(&buf[1..], &data[9000..]);
        let e = Plain(&*f)
            .read_at_nowait_append(&mut buf, 10, 0)
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        assert_eq!(buf.len(), 1001, "a failed read appends nothing");
    }

    #[test]
    fn write_read_sync_and_atomic_replace() {
        let dir = tempfile::tempdir().unwrap();
        let fs = RealFileSystem;
        let p = dir.path().join("a");
        let f = fs.open(&p, OpenOptions::create_new()).unwrap();
        f.write_all_at(b"hello", 0).unwrap();
        f.write_all_at(b"world", 5).unwrap();
        f.sync_data().unwrap();
        f.allocate(1 << 20).unwrap();
        assert_eq!(
            f.len().unwrap(),
            10,
            "KEEP_SIZE preallocation must not change the length"
        );
        let mut buf = [0u8; 10];
        f.read_exact_at(&mut buf, 0).unwrap();
        assert_eq!(&buf, b"helloworld");
        assert!(
            f.read_exact_at(&mut buf, 5).is_err(),
            "reading past the end must fail"
        );
        assert!(fs.open(&p, OpenOptions::create_new()).is_err());

        fs.write_file_atomic(&dir.path().join("b"), b"v1").unwrap();
        fs.write_file_atomic(&dir.path().join("b"), b"v2!").unwrap();
        assert_eq!(fs.read_file(&dir.path().join("b")).unwrap(), b"v2!");
        assert_eq!(fs.list_dir(dir.path()).unwrap(), vec!["a", "b"]);
        let space = fs.space(dir.path()).unwrap();
        assert!(space.total > 0 && space.free <= space.total);
    }

    /// More buffers than one pwritev takes (IOV_MAX 1024), empty ones among them: the
    /// file holds their concatenation.
    #[test]
    fn vectored_writes_land_back_to_back() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("v");
        let f = RealFileSystem.open(&p, OpenOptions::create_new()).unwrap();
        let bufs: Vec<Vec<u8>> = (0..2500u32)
            .map(|i| vec![(i % 251) as u8; (i % 7) as usize * 100])
            .collect();
        let refs: Vec<&[u8]> = bufs.iter().map(|b| &b[..]).collect();
        f.write_all_vectored_at(&refs, 10).unwrap();
        let want: Vec<u8> = bufs.concat();
        assert_eq!(f.len().unwrap(), 10 + want.len() as u64);
        let mut got = vec![0u8; want.len()];
        f.read_exact_at(&mut got, 10).unwrap();
        assert!(got == want, "the file differs from the buffers written");
    }

    #[test]
    fn write_back_and_drop_cache_leave_the_bytes_alone() {
        let dir = tempfile::tempdir().unwrap();
        let f = RealFileSystem
            .open(&dir.path().join("w"), OpenOptions::create_new())
            .unwrap();
        let data: Vec<u8> = (0..3 << 20).map(|i| (i % 251) as u8).collect();
        f.write_all_at(&data, 0).unwrap();
        f.start_write_back(0, 1 << 20).unwrap();
        f.write_back(0, data.len() as u64).unwrap();
        // A range past the end, or beyond what the kernel's offsets can express, is no
        // error: write-back is a hint about pages, not an operation on the file's size.
        f.write_back(10 << 20, 1 << 20).unwrap();
        f.write_back(u64::MAX - 1, 1).unwrap();
        f.sync_data().unwrap();
        f.drop_cache(0, 2 << 20).unwrap();
        f.drop_cache(0, data.len() as u64).unwrap();
        let mut back = vec![0u8; data.len()];
        f.read_exact_at(&mut back, 0).unwrap();
        assert!(back == data, "write-back changed the file's bytes");
        assert_eq!(f.len().unwrap(), data.len() as u64);
    }

    #[test]
    fn a_direct_file_takes_aligned_writes_and_refuses_unaligned_ones() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("d");
        let f = match RealFileSystem.open(&p, OpenOptions::create_new().direct(true)) {
            Ok(f) => f,
            // A file system without O_DIRECT (tmpfs) refuses the open itself: the
            // journal's fallback case.
            Err(e) => {
                assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
                return;
            }
        };
        let mut block = crate::AlignedBuf::zeroed(2 * crate::DIRECT_IO_ALIGN);
        block.truncate(0);
        block
            .vec()
            .extend((0..2 * crate::DIRECT_IO_ALIGN).map(|i| (i % 253) as u8));
        assert!(block.is_aligned());
        f.write_all_at(block.as_slice(), 0).unwrap();
        f.sync_data().unwrap();
        // Proof the page cache is bypassed: O_DIRECT refuses a length that is not a
        // multiple of the block size.
        let e = f.write_all_at(&block.as_slice()[..100], 0).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "{e}");
        let back = RealFileSystem.read_file(&p).unwrap();
        assert!(back == block.as_slice(), "direct write changed the bytes");
    }

    #[test]
    fn an_exclusive_lock_excludes_a_second_holder_until_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("LOCK");
        let held = RealFileSystem.lock_exclusive(&p).unwrap();
        let e = RealFileSystem.lock_exclusive(&p).err().unwrap();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock, "{e}");
        assert!(e.to_string().contains(&p.display().to_string()), "{e}");
        drop(held);
        let again = RealFileSystem.lock_exclusive(&p).unwrap();
        drop(again);
        assert!(p.exists());
    }

    #[test]
    fn errors_name_the_path() {
        let e = RealFileSystem
            .open(Path::new("/nonexistent-folio-dir/x"), OpenOptions::read())
            .err()
            .unwrap();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(e.to_string().contains("/nonexistent-folio-dir/x"), "{e}");
    }
}
