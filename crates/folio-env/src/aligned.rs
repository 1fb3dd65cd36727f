//! A byte buffer whose contents start at a block-aligned address, for direct I/O.
//!
//! A file opened with `O_DIRECT` takes only writes whose memory address, offset and length
//! are multiples of the device's block size ([`DIRECT_IO_ALIGN`]). `Vec<u8>` gives no
//! such address, so [`AlignedBuf`] over-allocates a `Vec` and keeps its contents at the
//! first aligned address inside it: plain safe code, no custom allocator. Writers append
//! through [`AlignedBuf::vec`] (so encoders that take `&mut Vec<u8>` work unchanged) after
//! reserving room with [`AlignedBuf::reserve`], which is what keeps the address aligned:
//! only a reallocation could move it, and `reserve` re-aligns when it reallocates.

/// The alignment of direct I/O: address, file offset and length. 4096 covers every
/// logical block size Linux uses (512 and 4096).
pub const DIRECT_IO_ALIGN: usize = 4096;

/// A growable byte buffer whose contents start at a multiple of [`DIRECT_IO_ALIGN`].
#[derive(Debug, Default)]
pub struct AlignedBuf {
    /// The allocation; the contents are `raw[start..]`.
    raw: Vec<u8>,
    /// Where the aligned contents begin inside `raw`.
    start: usize,
}

impl AlignedBuf {
    /// An empty buffer with room for `capacity` bytes.
    pub fn with_capacity(capacity: usize) -> Self {
        let mut b = AlignedBuf::default();
        b.reserve(capacity);
        b
    }

    /// A buffer of `len` zero bytes.
    pub fn zeroed(len: usize) -> Self {
        let mut b = AlignedBuf::with_capacity(len);
        b.raw.resize(b.start + len, 0);
        b
    }

    /// Makes room for `additional` more bytes without a reallocation, moving the
    /// contents to an aligned address in the new allocation if one is needed.
    pub fn reserve(&mut self, additional: usize) {
        let len = self.len();
        if self.raw.capacity() - self.raw.len() >= additional && self.is_aligned() {
            return;
        }
        let mut raw: Vec<u8> = Vec::with_capacity(len + additional + DIRECT_IO_ALIGN);
        let start = raw.as_ptr().align_offset(DIRECT_IO_ALIGN);
        raw.resize(start, 0);
        raw.extend_from_slice(self.as_slice());
        self.raw = raw;
        self.start = start;
    }

    /// Empties the buffer, keeping its allocation.
    pub fn clear(&mut self) {
        self.raw.truncate(self.start);
    }

    /// Shortens the contents to `len` bytes (no-op if already shorter).
    pub fn truncate(&mut self, len: usize) {
        self.raw.truncate(self.start + len);
    }

    /// Appends zero bytes until the length is a multiple of `align` (a power of two).
    pub fn pad_to(&mut self, align: usize) {
        let len = self.len();
        let padded = len.next_multiple_of(align);
        self.raw.resize(self.start + padded, 0);
    }

    /// The contents' length.
    pub fn len(&self) -> usize {
        self.raw.len() - self.start
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The underlying vector, to append to (its head before the contents is padding:
    /// index the contents through [`AlignedBuf::as_slice`]). Appending more than was reserved may
    /// reallocate and lose the alignment; [`AlignedBuf::is_aligned`] tells.
    pub fn vec(&mut self) -> &mut Vec<u8> {
        &mut self.raw
    }

    /// Whether the contents start at an aligned address.
    pub fn is_aligned(&self) -> bool {
        (self.raw.as_ptr() as usize + self.start).is_multiple_of(DIRECT_IO_ALIGN)
    }

    /// The contents.
    pub fn as_slice(&self) -> &[u8] {
        &self.raw[self.start..]
    }

    /// The contents, to change in place.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.raw[self.start..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn aligned(s: &[u8]) -> bool {
        (s.as_ptr() as usize).is_multiple_of(DIRECT_IO_ALIGN)
    }

    #[test]
    fn contents_stay_aligned_through_growth_and_keep_their_bytes() {
        let mut b = AlignedBuf::with_capacity(10);
        assert!(b.is_empty() && aligned(b.as_slice()));
        b.vec().extend_from_slice(b"journal");
        assert_eq!(b.as_slice(), b"journal");
        // Growing far past the first allocation re-aligns and keeps the contents.
        for round in 0..5 {
            let more = 3 * DIRECT_IO_ALIGN + round;
            b.reserve(more);
            let before = b.len();
            b.vec().extend(std::iter::repeat_n(round as u8, more));
            assert!(b.is_aligned(), "round {round}");
            assert!(aligned(b.as_slice()), "round {round}");
            assert_eq!(b.len(), before + more);
        }
        assert_eq!(&b.as_slice()[..7], b"journal");
        let unpadded = b.len();
        b.pad_to(DIRECT_IO_ALIGN);
        assert!(b.len().is_multiple_of(DIRECT_IO_ALIGN));
        assert!(b.len() > unpadded, "{unpadded} was not a multiple already");
        assert!(
            b.as_slice()[unpadded..].iter().all(|&x| x == 0),
            "padding is zeroes"
        );
        b.truncate(3);
        assert_eq!(b.as_slice(), b"jou");
        b.clear();
        assert!(b.is_empty() && aligned(b.as_slice()));
    }

    #[test]
    fn zeroed_is_aligned_and_zero() {
        let z = AlignedBuf::zeroed(3 * DIRECT_IO_ALIGN);
        assert!(aligned(z.as_slice()));
        assert_eq!(z.len(), 3 * DIRECT_IO_ALIGN);
        assert!(z.as_slice().iter().all(|&b| b == 0));
    }
}
