//! What a data file holds, told by its first bytes, never by its name (Paddle hands the
//! pipe the file on stdin, and log pipelines name files as they like): text, data of a
//! compression the pipe decompresses (gzip, bzip2, xz, zstd; concatenated streams as log
//! rotators write them, zero padding between or after them), or a format it recognises
//! and refuses by name. The rules and the messages are `elasticctr_common/datafiles.py`'s;
//! test_trainer_native_pipe.py runs both.

use std::io::{self, BufRead, BufReader, Read};

/// Leading bytes looked at: the longest signature below (bzip2's).
pub const HEAD: usize = 10;
/// A refused format's report: `<what>: NOT_READ`.
pub const NOT_READ: &str = "neither text nor gzip, bzip2, xz or zstd data";
/// Formats recognised and refused: archives and columnar files hold no lines, and lz4 and
/// snappy framing are not what log pipelines write as files (docs/trainer.md, "Data").
const REFUSED: [(&[u8], &str); 6] = [
    (b"PK\x03\x04", "a zip archive"),
    (b"PK\x05\x06", "a zip archive"),
    (b"7z\xbc\xaf\x27\x1c", "a 7z archive"),
    (b"PAR1", "a Parquet file"),
    (b"\x04\x22\x4d\x18", "lz4-compressed data"),
    (b"\xff\x06\x00\x00sNaPpY", "snappy-framed data"),
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    Gzip,
    Bzip2,
    Xz,
    Zstd,
}

#[derive(Debug, PartialEq, Eq)]
pub enum Kind {
    Text,
    Compressed(Compression),
    Refused(&'static str),
}

/// The kind of a file whose first (up to) HEAD bytes are `head`.
pub fn sniff(head: &[u8]) -> Kind {
    // gzip: ID1 ID2. bzip2: "BZh", the block size, then a block's or the end's magic.
    // xz: its stream header magic. zstd: a frame's magic, or a skippable frame's
    // (0x184D2A50..5F, little-endian), which pzstd writes first.
    if head.starts_with(b"\x1f\x8b") {
        return Kind::Compressed(Compression::Gzip);
    }
    if head.len() == HEAD
        && head.starts_with(b"BZh")
        && (b'1'..=b'9').contains(&head[3])
        && (&head[4..] == b"1AY&SY" || &head[4..] == b"\x17rE8P\x90")
    {
        return Kind::Compressed(Compression::Bzip2);
    }
    if head.starts_with(b"\xfd7zXZ\x00") {
        return Kind::Compressed(Compression::Xz);
    }
    if head.starts_with(b"\x28\xb5\x2f\xfd")
        || (head.len() >= 4 && head[0] & 0xf0 == 0x50 && &head[1..4] == b"\x2a\x4d\x18")
    {
        return Kind::Compressed(Compression::Zstd);
    }
    match REFUSED.iter().find(|(magic, _)| head.starts_with(magic)) {
        Some((_, what)) => Kind::Refused(what),
        None => Kind::Text,
    }
}

impl Compression {
    pub fn name(self) -> &'static str {
        match self {
            Compression::Gzip => "gzip",
            Compression::Bzip2 => "bzip2",
            Compression::Xz => "xz",
            Compression::Zstd => "zstd",
        }
    }

    /// The decompressed bytes of `input`, every stream of it in turn.
    pub fn decoder<'a>(self, input: impl BufRead + 'a) -> io::Result<Box<dyn BufRead + 'a>> {
        let streams = Streams {
            compression: self,
            stream: Some(Stream::new(self, input)?),
        };
        Ok(Box::new(BufReader::with_capacity(1 << 16, streams)))
    }

    /// The report of a stream that broke off or is damaged after `lines` lines were read.
    pub fn broken(self, lines: u64) -> String {
        let name = self.name();
        if lines == 0 {
            format!("{name}: truncated or corrupt data before its first line")
        } else {
            format!("{name}: truncated or corrupt data after line {lines}")
        }
    }
}

/// One stream (a gzip member, a bzip2 or xz stream, a zstd frame) being decoded; it
/// consumes no byte of its input past its own end.
enum Stream<R: BufRead> {
    Gzip(flate2::bufread::GzDecoder<R>),
    Bzip2(bzip2::bufread::BzDecoder<R>),
    Xz(liblzma::bufread::XzDecoder<R>),
    Zstd(zstd::stream::read::Decoder<'static, R>),
}

impl<R: BufRead> Stream<R> {
    fn new(compression: Compression, input: R) -> io::Result<Stream<R>> {
        Ok(match compression {
            Compression::Gzip => Stream::Gzip(flate2::bufread::GzDecoder::new(input)),
            Compression::Bzip2 => Stream::Bzip2(bzip2::bufread::BzDecoder::new(input)),
            Compression::Xz => Stream::Xz(liblzma::bufread::XzDecoder::new(input)),
            Compression::Zstd => {
                Stream::Zstd(zstd::stream::read::Decoder::with_buffer(input)?.single_frame())
            }
        })
    }

    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Gzip(decoder) => decoder.read(buf),
            Stream::Bzip2(decoder) => decoder.read(buf),
            Stream::Xz(decoder) => decoder.read(buf),
            Stream::Zstd(decoder) => decoder.read(buf),
        }
    }

    fn into_inner(self) -> R {
        match self {
            Stream::Gzip(decoder) => decoder.into_inner(),
            Stream::Bzip2(decoder) => decoder.into_inner(),
            Stream::Xz(decoder) => decoder.into_inner(),
            Stream::Zstd(decoder) => decoder.finish(),
        }
    }
}

/// Stream after stream, as one reader. After a stream's end comes the end of the input,
/// zero bytes (padding: gzip and xz tools write and skip it, and it holds no data), or the
/// next stream; anything else fails as a stream that does not decode, never ignored
/// (Python's BZ2File and LZMAFile would drop such trailing bytes unread).
struct Streams<R: BufRead> {
    compression: Compression,
    stream: Option<Stream<R>>,
}

impl<R: BufRead> Read for Streams<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while let Some(stream) = self.stream.as_mut() {
            let n = stream.read(buf)?;
            if n > 0 || buf.is_empty() {
                return Ok(n);
            }
            let Some(stream) = self.stream.take() else {
                break;
            };
            let mut input = stream.into_inner();
            loop {
                let rest = input.fill_buf()?;
                if rest.is_empty() {
                    return Ok(0);
                }
                let zeros = rest.iter().take_while(|&&b| b == 0).count();
                if zeros == 0 {
                    break;
                }
                input.consume(zeros);
            }
            self.stream = Some(Stream::new(self.compression, input)?);
        }
        Ok(0)
    }
}

/// The first HEAD bytes of `input` (fewer if it is shorter), consumed from it.
pub fn read_head(input: &mut impl BufRead) -> io::Result<Vec<u8>> {
    let mut head = Vec::with_capacity(HEAD);
    while head.len() < HEAD {
        let buf = input.fill_buf()?;
        if buf.is_empty() {
            break;
        }
        let n = buf.len().min(HEAD - head.len());
        head.extend_from_slice(&buf[..n]);
        input.consume(n);
    }
    Ok(head)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn decoded(compression: Compression, data: &[u8]) -> io::Result<Vec<u8>> {
        let mut out = Vec::new();
        compression.decoder(data)?.read_to_end(&mut out)?;
        Ok(out)
    }

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        encoder.write_all(data).unwrap();
        encoder.finish().unwrap()
    }

    #[test]
    fn kinds_by_their_first_bytes() {
        for (head, kind) in [
            (
                &b"\x1f\x8b\x08\x00"[..],
                Kind::Compressed(Compression::Gzip),
            ),
            (b"BZh91AY&SY", Kind::Compressed(Compression::Bzip2)),
            (b"BZh1\x17rE8P\x90", Kind::Compressed(Compression::Bzip2)),
            (b"\xfd7zXZ\x00\x00\x04", Kind::Compressed(Compression::Xz)),
            (b"\x28\xb5\x2f\xfd\x04", Kind::Compressed(Compression::Zstd)),
            (b"\x50\x2a\x4d\x18\x04", Kind::Compressed(Compression::Zstd)),
            (b"PK\x03\x04\x14", Kind::Refused("a zip archive")),
            (b"PAR1\x15\x04", Kind::Refused("a Parquet file")),
            (
                b"\x04\x22\x4d\x18\x64",
                Kind::Refused("lz4-compressed data"),
            ),
            (b"BZh9 text", Kind::Text), // "BZh" without a block's magic
            (b"BZh0AY&SY!", Kind::Text),
            (b"\x60\x2a\x4d\x18", Kind::Text),
            (b"1 0 5:101\n", Kind::Text),
            (b"\x1f", Kind::Text),
            (b"", Kind::Text),
        ] {
            assert_eq!(sniff(head), kind, "{head:?}");
        }
    }

    #[test]
    fn concatenated_gzip_members_are_read_whole() {
        let data = [gzip(b"1 0 5:101\n"), gzip(b""), gzip(b"2 1 6:102\n")].concat();
        assert_eq!(
            decoded(Compression::Gzip, &data).unwrap(),
            b"1 0 5:101\n2 1 6:102\n"
        );
    }

    #[test]
    fn truncated_or_damaged_gzip_is_an_error_not_an_end() {
        let data = gzip(&b"1 0 5:101\n".repeat(1000));
        for cut in [data.len() - 1, data.len() - 8, data.len() / 2, 11] {
            assert!(
                decoded(Compression::Gzip, &data[..cut]).is_err(),
                "cut at {cut}"
            );
        }
        let mut damaged = data.clone();
        let last = damaged.len() - 5; // the length in the trailer
        damaged[last] ^= 1;
        assert!(decoded(Compression::Gzip, &damaged).is_err());
        assert_eq!(
            Compression::Gzip.broken(3),
            "gzip: truncated or corrupt data after line 3"
        );
    }

    #[test]
    fn after_a_stream_only_padding_or_another_stream() {
        let member = gzip(b"1 0 5:101\n");
        let padded = [&member[..], &[0; 7], &member, &[0; 3]].concat();
        assert_eq!(
            decoded(Compression::Gzip, &padded).unwrap(),
            b"1 0 5:101\n1 0 5:101\n"
        );
        let trailing = [&member[..], b"not a stream\n"].concat();
        assert!(decoded(Compression::Gzip, &trailing).is_err());
    }

    #[test]
    fn the_head_is_read_across_short_reads() {
        let mut input = BufReader::with_capacity(3, &b"\x1f\x8b\x08\x00abcdefgh"[..]);
        assert_eq!(read_head(&mut input).unwrap(), b"\x1f\x8b\x08\x00abcdef");
        let mut rest = Vec::new();
        input.read_to_end(&mut rest).unwrap();
        assert_eq!(rest, b"gh");
        assert_eq!(read_head(&mut &b"1 0"[..]).unwrap(), b"1 0");
    }
}
