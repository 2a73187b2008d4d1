//! Zigzag varints as Kafka's `ByteUtils` reads and writes them, over bounded cursors.

/// A read position in untrusted bytes that never moves past `end`.
pub struct Cursor<'a> {
    data: &'a [u8],
    pub pos: usize,
    end: usize,
}

impl<'a> Cursor<'a> {
    pub fn new(data: &'a [u8], pos: usize, end: usize) -> Self {
        Cursor { data, pos, end: end.min(data.len()) }
    }

    pub fn set_end(&mut self, end: usize) {
        self.end = end.min(self.data.len());
    }

    fn byte(&mut self) -> Option<u8> {
        if self.pos >= self.end {
            return None;
        }
        let b = self.data[self.pos];
        self.pos += 1;
        Some(b)
    }

    /// A varint of at most 5 bytes, its value taken modulo 2^32 (as `decode_varint`).
    pub fn varint(&mut self) -> Option<i32> {
        let mut result: u64 = 0;
        for i in 0..5 {
            let b = self.byte()?;
            result |= u64::from(b & 0x7f) << (7 * i);
            if b < 0x80 {
                let r = result as u32;
                return Some(((r >> 1) as i32) ^ -((r & 1) as i32));
            }
        }
        None
    }

    /// A varlong of at most 10 bytes, modulo 2^64.
    pub fn varlong(&mut self) -> Option<i64> {
        let mut result: u64 = 0;
        for i in 0..10 {
            let b = self.byte()?;
            result |= u64::from(b & 0x7f) << (7 * i);
            if b < 0x80 {
                return Some(((result >> 1) as i64) ^ -((result & 1) as i64));
            }
        }
        None
    }

    /// Skip `len` bytes, returning where they start.
    pub fn take(&mut self, len: usize) -> Option<usize> {
        let start = self.pos;
        if len > self.end - start {
            return None;
        }
        self.pos += len;
        Some(start)
    }
}

/// Zigzag of a signed value (Kafka's varlong mapping).
#[inline]
pub fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// Bytes the varint of `v` takes.
#[inline]
pub fn size_of(v: i64) -> usize {
    let z = zigzag(v);
    let bits = 64 - (z | 1).leading_zeros() as usize;
    bits.div_ceil(7)
}

/// Write the varint of `v` at `out[at..]`, returning the position after it.
#[inline]
pub fn put(out: &mut [u8], mut at: usize, v: i64) -> usize {
    let mut z = zigzag(v);
    while z >= 0x80 {
        out[at] = (z as u8) | 0x80;
        z >>= 7;
        at += 1;
    }
    out[at] = z as u8;
    at + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        for v in [0i64, 1, -1, 63, -64, 64, 300, -300, i32::MAX as i64, i32::MIN as i64] {
            let mut buf = [0u8; 10];
            let end = put(&mut buf, 0, v);
            assert_eq!(end, size_of(v));
            let mut c = Cursor::new(&buf, 0, end);
            assert_eq!(c.varint(), Some(v as i32));
            let mut c = Cursor::new(&buf, 0, end);
            assert_eq!(c.varlong(), Some(v));
        }
        for v in [i64::MAX, i64::MIN] {
            let mut buf = [0u8; 10];
            let end = put(&mut buf, 0, v);
            assert_eq!(end, 10);
            assert_eq!(Cursor::new(&buf, 0, end).varlong(), Some(v));
        }
    }

    #[test]
    fn bounds() {
        let buf = [0x80u8, 0x80, 0x80, 0x80, 0x80, 0x01];
        assert_eq!(Cursor::new(&buf, 0, 6).varint(), None); // longer than 5 bytes
        assert_eq!(Cursor::new(&buf, 0, 3).varlong(), None); // ends inside
    }
}
