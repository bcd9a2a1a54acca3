//! The codec's byte helpers: a bounds-checked big-endian [`Reader`] that every decoder uses, so
//! that a short buffer is a [`CodecError::Truncated`] naming what was being decoded, never a
//! panic, and the few writers that patch lengths and pad messages.

use super::CodecError;

/// A bounds-checked big-endian reader over a byte slice.
///
/// Every read past the end is a [`CodecError::Truncated`] naming `what` was being decoded.
#[derive(Debug, Clone)]
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    what: &'static str,
}

impl<'a> Reader<'a> {
    /// A reader at the start of `buf`, decoding `what`.
    pub(crate) fn new(buf: &'a [u8], what: &'static str) -> Self {
        Reader { buf, pos: 0, what }
    }

    /// Changes what errors say is being decoded.
    pub(crate) fn set_what(&mut self, what: &'static str) {
        self.what = what;
    }

    /// Bytes not read yet.
    pub(crate) fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// Bytes read so far.
    pub(crate) fn pos(&self) -> usize {
        self.pos
    }

    /// The next `n` bytes.
    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], CodecError> {
        if self.remaining() < n {
            return Err(CodecError::Truncated {
                what: self.what,
                need: self.pos + n,
                have: self.buf.len(),
            });
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    /// Checks the length field of an element (action, instruction, bucket, stats entry):
    /// at least `min` bytes and a multiple of 8, else `Malformed` with `detail`.
    pub(crate) fn check_len(
        &self,
        len: usize,
        min: usize,
        detail: impl FnOnce() -> String,
    ) -> Result<(), CodecError> {
        if len < min || !len.is_multiple_of(8) {
            return Err(CodecError::Malformed {
                what: self.what,
                detail: detail(),
            });
        }
        Ok(())
    }

    /// Skips `n` bytes.
    pub(crate) fn skip(&mut self, n: usize) -> Result<(), CodecError> {
        self.take(n).map(|_| ())
    }

    /// Everything not read yet.
    pub(crate) fn rest(&mut self) -> &'a [u8] {
        let s = &self.buf[self.pos..];
        self.pos = self.buf.len();
        s
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], CodecError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    /// One byte.
    pub(crate) fn u8(&mut self) -> Result<u8, CodecError> {
        Ok(self.array::<1>()?[0])
    }

    /// A big-endian `u16`.
    pub(crate) fn u16(&mut self) -> Result<u16, CodecError> {
        Ok(u16::from_be_bytes(self.array()?))
    }

    /// A big-endian `u32`.
    pub(crate) fn u32(&mut self) -> Result<u32, CodecError> {
        Ok(u32::from_be_bytes(self.array()?))
    }

    /// A big-endian `u64`.
    pub(crate) fn u64(&mut self) -> Result<u64, CodecError> {
        Ok(u64::from_be_bytes(self.array()?))
    }
}

/// Big-endian unsigned integer of up to 8 bytes.
pub(crate) fn be_u128(bytes: &[u8]) -> u128 {
    bytes
        .iter()
        .fold(0u128, |acc, b| (acc << 8) | u128::from(*b))
}

/// A big-endian unsigned integer of at most 8 bytes.
pub(crate) fn be_uint(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0u64, |acc, b| (acc << 8) | u64::from(*b))
}

/// Appends zeros until `out.len() - start` is a multiple of 8.
pub(crate) fn pad_to_8(out: &mut Vec<u8>, start: usize) {
    let len = out.len() - start;
    out.resize(start + len.div_ceil(8) * 8, 0);
}

/// Writes `value` as a big-endian `u16` at `at` (a length patched after the body is known).
pub(crate) fn patch_u16(out: &mut [u8], at: usize, value: u16) {
    out[at..at + 2].copy_from_slice(&value.to_be_bytes());
}

/// The length of `out[start..]` as a `u16`, or an error naming `what` when it does not fit.
pub(crate) fn len_u16(out: &[u8], start: usize, what: &'static str) -> Result<u16, CodecError> {
    let len = out.len() - start;
    u16::try_from(len).map_err(|_| CodecError::Malformed {
        what,
        detail: format!("{len} bytes do not fit a 16-bit length"),
    })
}
