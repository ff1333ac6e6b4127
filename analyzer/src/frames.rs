//! A stored output as a run of zstd frames, and the copying of whole frames into the next one.
//!
//! After one file is edited, almost every target's output comes back unchanged from the stored
//! result ([`crate::results`]). Compressing those ~570 MB again (a site-packages tree) cost more
//! CPU than everything else the run did. So a stored output is cut into frames of whole
//! targets (each with the comma before it), about [`FRAME_RAW`] bytes each, and when the next
//! output holds the same targets of a frame one after the other, that frame's compressed
//! bytes are copied instead. A frame that also holds other bytes (the document's head or
//! tail) is never copied. Decoders read the frames as one stream.

use std::fs::File;
use std::io::{Read, Seek, Write};
use std::os::unix::fs::FileExt;
use std::sync::mpsc::{Receiver, Sender, SyncSender};

use serde::{Deserialize, Serialize};

/// Raw bytes after which a frame ends at the next target. Large enough that ending a frame
/// (which waits for zstd's thread) is rare, small enough that an edit recompresses little.
pub const FRAME_RAW: u64 = 4 << 20;

/// One compressed frame of a stored output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Frame {
    /// The first target that starts in it, and how many do.
    pub first: u32,
    pub targets: u32,
    /// Where its compressed bytes are in the entry, and how many.
    pub at: u64,
    pub len: u64,
    /// Whether it holds those targets (each with the comma before it) and nothing else.
    pub whole: bool,
}

/// The frames of a stored entry, to copy from.
pub struct FrameSource {
    file: File,
    frames: Vec<Frame>,
    /// Index in `frames` by first target, for whole frames only.
    by_first: std::collections::HashMap<u32, usize>,
}

impl FrameSource {
    pub fn new(file: File, frames: Vec<Frame>) -> FrameSource {
        let by_first = (frames.iter().enumerate())
            .filter(|(_, frame)| frame.whole)
            .map(|(index, frame)| (frame.first, index))
            .collect();
        FrameSource {
            file,
            frames,
            by_first,
        }
    }
}

/// Targets of a stored frame seen so far, in order, held back. Only their length is kept:
/// they are the start of the stored frame, decoded again in the rare case that it is not
/// copied whole (copying ~570 MB of held bytes cost more than decoding a frame now and then).
struct Held {
    frame: Frame,
    next_old: u32,
    first_new: u32,
    len: u64,
}

type RawEncoder = zstd::stream::raw::Encoder<'static>;

/// Where bytes go: into the current frame's encoder, or (between frames) the file itself,
/// beside the encoder kept for the next frame (one compression context, and zstd's thread,
/// serve every frame).
enum Sink {
    Frame(zstd::stream::zio::Writer<File, RawEncoder>),
    File(File, RawEncoder),
    /// Only while switching, or after an error.
    None,
}

/// Compresses an output into frames, copying stored ones where it can.
pub struct FrameWriter {
    sink: Sink,
    /// Where the current frame starts in the file, its first target, its raw bytes so far,
    /// and whether they are whole targets only.
    frame_at: u64,
    frame_first: u32,
    frame_raw: u64,
    frame_whole: bool,
    /// Targets written so far.
    targets: u32,
    frames: Vec<Frame>,
    held: Option<Held>,
    source: Option<FrameSource>,
}

impl FrameWriter {
    /// Frames written to `file` from its current end.
    pub fn new(file: File) -> std::io::Result<FrameWriter> {
        let mut encoder = RawEncoder::new(1)?;
        // Compression runs on zstd's own thread, beside the closures being computed.
        let _ = encoder.set_parameter(zstd::stream::raw::CParameter::NbWorkers(1));
        Ok(FrameWriter {
            sink: Sink::File(file, encoder),
            frame_at: 0,
            frame_first: 0,
            frame_raw: 0,
            frame_whole: true,
            targets: 0,
            frames: Vec::new(),
            held: None,
            source: None,
        })
    }

    pub fn copy_from(&mut self, source: FrameSource) {
        self.source = Some(source);
    }

    /// Bytes that are not a target (the document's head and tail).
    pub fn write_other(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.release_held()?;
        self.frame_whole = false;
        self.compress(bytes)
    }

    /// The next target's bytes (`parts`: its comma, if any, then its JSON); `old` is its
    /// number in the stored output it was copied from, if it was.
    pub fn write_target(&mut self, parts: &[&[u8]], old: Option<u32>) -> std::io::Result<()> {
        let number = self.targets;
        self.targets += 1;
        let next = self.targets;
        let len: u64 = parts.iter().map(|part| part.len() as u64).sum();
        if let Some(held) = &mut self.held {
            if old == Some(held.next_old) {
                held.len += len;
                held.next_old += 1;
                return self.copy_if_complete(next);
            }
            self.release_held()?;
        }
        if let Some(frame) = old.and_then(|old| self.frame_starting(old, number)) {
            self.end_frame(number)?;
            let (next_old, first_new) = (frame.first + 1, number);
            self.held = Some(Held {
                frame,
                next_old,
                first_new,
                len,
            });
            return self.copy_if_complete(next);
        }
        if self.frame_raw >= FRAME_RAW {
            self.end_frame(number)?;
        }
        if self.frame_raw == 0 {
            self.frame_first = number;
        }
        parts.iter().try_for_each(|part| self.compress(part))
    }

    /// The whole stored frame that starts with old target `old`, when new target `number`
    /// can take its place (both first, or both after a comma).
    fn frame_starting(&self, old: u32, number: u32) -> Option<Frame> {
        let source = self.source.as_ref()?;
        let frame = source.frames[*source.by_first.get(&old)?];
        ((old == 0) == (number == 0)).then_some(frame)
    }

    /// Once every target of the held frame came, its compressed bytes are copied; `next` is
    /// the number of the target after them.
    fn copy_if_complete(&mut self, next: u32) -> std::io::Result<()> {
        let complete = self
            .held
            .as_ref()
            .is_some_and(|held| held.next_old == held.frame.first + held.frame.targets);
        if !complete {
            return Ok(());
        }
        let Some(held) = self.held.take() else {
            return Ok(());
        };
        let source = (self.source.as_ref()).ok_or_else(|| std::io::Error::other("no source"))?;
        let Sink::File(file, _) = &mut self.sink else {
            return Err(std::io::Error::other("a frame copied into an open frame"));
        };
        // File to file: the kernel copies (no reader uses the source's offset).
        let mut stored = &source.file;
        stored.seek(std::io::SeekFrom::Start(held.frame.at))?;
        if std::io::copy(&mut stored.take(held.frame.len), file)? != held.frame.len {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        self.frames.push(Frame {
            first: held.first_new,
            targets: held.frame.targets,
            at: self.frame_at,
            len: held.frame.len,
            whole: true,
        });
        self.frame_at += held.frame.len;
        self.frame_first = next;
        Ok(())
    }

    /// The compressed bytes of stored frame `frame`.
    fn stored_frame(&self, frame: Frame) -> std::io::Result<Vec<u8>> {
        let source = (self.source.as_ref()).ok_or_else(|| std::io::Error::other("no source"))?;
        let mut compressed = vec![0u8; usize::try_from(frame.len).map_err(std::io::Error::other)?];
        source.file.read_exact_at(&mut compressed, frame.at)?;
        Ok(compressed)
    }

    /// The held targets' bytes: the start of their stored frame, as it was written then (and
    /// now, since they were copied from it).
    fn held_bytes(&self, held: &Held) -> std::io::Result<Vec<u8>> {
        let compressed = self.stored_frame(held.frame)?;
        let decoder = zstd::stream::read::Decoder::with_buffer(compressed.as_slice())?;
        let mut bytes = Vec::new();
        decoder.take(held.len).read_to_end(&mut bytes)?;
        if bytes.len() as u64 != held.len {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        Ok(bytes)
    }

    /// Held targets that will not make a whole stored frame: compressed like any others.
    fn release_held(&mut self) -> std::io::Result<()> {
        let Some(held) = self.held.take() else {
            return Ok(());
        };
        if self.frame_raw == 0 {
            self.frame_first = held.first_new;
        }
        let bytes = self.held_bytes(&held)?;
        self.compress(&bytes)
    }

    fn compress(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        if bytes.is_empty() {
            return Ok(());
        }
        if matches!(self.sink, Sink::File(..)) {
            let Sink::File(file, encoder) = std::mem::replace(&mut self.sink, Sink::None) else {
                unreachable!("matched above");
            };
            self.sink = Sink::Frame(zstd::stream::zio::Writer::new(file, encoder));
        }
        self.frame_raw += bytes.len() as u64;
        match &mut self.sink {
            Sink::Frame(encoder) => encoder.write_all(bytes),
            _ => Err(std::io::Error::other("no file to write to")),
        }
    }

    /// End the current frame, if it has bytes, and note it; `next` is the first target after
    /// it.
    fn end_frame(&mut self, next: u32) -> std::io::Result<()> {
        if !matches!(self.sink, Sink::Frame(_)) {
            return Ok(()); // no bytes since the last frame
        }
        let Sink::Frame(mut writer) = std::mem::replace(&mut self.sink, Sink::None) else {
            unreachable!("matched above");
        };
        writer.finish()?;
        let (mut file, mut encoder) = writer.into_inner();
        zstd::stream::raw::Operation::reinit(&mut encoder)?;
        let end = file.stream_position()?;
        self.sink = Sink::File(file, encoder);
        self.frames.push(Frame {
            first: self.frame_first,
            targets: next - self.frame_first,
            at: self.frame_at,
            len: end - self.frame_at,
            whole: self.frame_whole,
        });
        self.frame_at = end;
        self.frame_raw = 0;
        self.frame_whole = true;
        self.frame_first = next;
        Ok(())
    }

    /// The file, after the last frame, and the frames written.
    pub fn finish(mut self) -> std::io::Result<(File, Vec<Frame>)> {
        self.release_held()?;
        self.end_frame(self.targets)?;
        match self.sink {
            Sink::File(file, _) => Ok((file, self.frames)),
            _ => Err(std::io::Error::other("the last frame did not end")),
        }
    }
}

/// A stored output's frames decoded in order on a thread of their own, while the reader takes
/// the one before: decoding was a third of the main thread's work when nearly every target's
/// output is reused from the stored one.
pub struct DecodedFrames {
    /// Each frame's bytes in turn; closed after the last (or after an error).
    decoded: Receiver<std::io::Result<Vec<u8>>>,
    /// Buffers read, for the decoder to fill again (a fresh one costs a page fault a page).
    spent: Sender<Vec<u8>>,
}

impl DecodedFrames {
    /// The output made of `frames` of `file`: they must follow one another from the file's
    /// start to `end`.
    pub fn start(file: File, frames: &[Frame], end: u64) -> std::io::Result<DecodedFrames> {
        let mut at = 0;
        for frame in frames {
            if frame.at != at {
                return Err(std::io::Error::other("stored frames with gaps"));
            }
            at += frame.len;
        }
        if at != end {
            return Err(std::io::Error::other("stored frames short of the output"));
        }
        let frames: Vec<(u64, u64)> = frames.iter().map(|frame| (frame.at, frame.len)).collect();
        // Decoding the next frame while the reader takes this one; no further ahead.
        let (decoded_sender, decoded) = std::sync::mpsc::sync_channel(0);
        let (spent, spent_receiver) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("lfm-frames".to_string())
            .spawn(move || decode_frames(&file, &frames, &decoded_sender, &spent_receiver))?;
        Ok(DecodedFrames { decoded, spent })
    }

    /// The next frame's bytes; None after the last.
    pub fn next_frame(&self) -> Option<std::io::Result<Vec<u8>>> {
        self.decoded.recv().ok()
    }

    /// A frame's bytes, read: its buffer serves a later frame.
    pub fn give_back(&self, buffer: Vec<u8>) {
        let _ = self.spent.send(buffer);
    }
}

/// Decode `frames` (offset, length) of `file` in order into `decoded`, until the reader
/// goes or a frame cannot be decoded.
fn decode_frames(
    file: &File,
    frames: &[(u64, u64)],
    decoded: &SyncSender<std::io::Result<Vec<u8>>>,
    spent: &Receiver<Vec<u8>>,
) {
    let mut context = zstd::zstd_safe::DCtx::create();
    let mut compressed = Vec::new();
    for &(at, len) in frames {
        let mut bytes = spent.try_recv().unwrap_or_default();
        let result = read_at(file, at, len, &mut compressed)
            .and_then(|()| decode_frame(&mut context, &compressed, &mut bytes))
            .map(|()| bytes);
        let failed = result.is_err();
        if decoded.send(result).is_err() || failed {
            return;
        }
    }
}

/// `len` bytes of `file` at `at` into `buffer`.
fn read_at(file: &File, at: u64, len: u64, buffer: &mut Vec<u8>) -> std::io::Result<()> {
    buffer.resize(usize::try_from(len).map_err(std::io::Error::other)?, 0);
    file.read_exact_at(buffer, at)
}

/// The bytes of the frame `compressed` into `out`, in one call: zstd's streaming decoder
/// decodes into a window of its own and copies out, which cost as much as decoding. The
/// frame does not say its size: `out` grows until it holds the frame.
fn decode_frame(
    context: &mut zstd::zstd_safe::DCtx,
    compressed: &[u8],
    out: &mut Vec<u8>,
) -> std::io::Result<()> {
    // Frames end after FRAME_RAW bytes at the next target: far more is a damaged frame.
    const LARGEST: usize = 64 * FRAME_RAW as usize;
    let mut capacity = out.capacity().max(FRAME_RAW as usize * 5 / 4);
    loop {
        out.clear();
        out.reserve(capacity);
        match context.decompress(out, compressed) {
            Ok(_) => return Ok(()),
            Err(_) if capacity < LARGEST => capacity *= 2,
            Err(code) => {
                let name = zstd::zstd_safe::get_error_name(code);
                return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, name));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes `[` + targets (JSON `t{n}` padded to `size` bytes, from `old` where given) + `]`,
    /// and returns the entry's bytes and frames.
    fn write(
        dir: &std::path::Path,
        name: &str,
        targets: &[(u32, Option<u32>)],
        source: Option<FrameSource>,
    ) -> (Vec<u8>, Vec<Frame>) {
        let path = dir.join(name);
        let file = File::create(&path).unwrap();
        let mut writer = FrameWriter::new(file).unwrap();
        if let Some(source) = source {
            writer.copy_from(source);
        }
        writer.write_other(b"[").unwrap();
        for (number, &(target, old)) in targets.iter().enumerate() {
            let json = format!("{target}{}", "0".repeat((FRAME_RAW / 3) as usize));
            let parts: Vec<&[u8]> = match number {
                0 => vec![json.as_bytes()],
                _ => vec![b",", json.as_bytes()],
            };
            writer.write_target(&parts, old).unwrap();
        }
        writer.write_other(b"]").unwrap();
        let (_, frames) = writer.finish().unwrap();
        (std::fs::read(&path).unwrap(), frames)
    }

    fn decoded(bytes: &[u8]) -> Vec<u8> {
        zstd::stream::decode_all(bytes).unwrap()
    }

    #[test]
    fn whole_frames_are_copied_and_the_stream_reads_the_same() {
        let dir = tempfile::tempdir().unwrap();
        let first: Vec<(u32, Option<u32>)> = (0..12).map(|n| (n, None)).collect();
        let (stored, frames) = write(dir.path(), "first", &first, None);
        assert!(frames.len() > 2, "{frames:?}");
        assert!(frames.iter().filter(|frame| frame.whole).count() >= 2);
        // Target 5 changed; the others come from the stored output.
        let second: Vec<(u32, Option<u32>)> = (0..12)
            .map(|n| (if n == 5 { 99 } else { n }, (n != 5).then_some(n)))
            .collect();
        let source = FrameSource::new(
            File::open(dir.path().join("first")).unwrap(),
            frames.clone(),
        );
        let (copied, new_frames) = write(dir.path(), "second", &second, Some(source));
        let (plain, _) = write(
            dir.path(),
            "plain",
            &second.iter().map(|&(t, _)| (t, None)).collect::<Vec<_>>(),
            None,
        );
        assert_eq!(decoded(&copied), decoded(&plain));
        assert_ne!(decoded(&copied), decoded(&stored));
        let reused = new_frames
            .iter()
            .filter(|f| {
                frames.iter().any(|s| {
                    s.whole
                        && s.len == f.len
                        && stored[s.at as usize..][..s.len as usize]
                            == copied[f.at as usize..][..f.len as usize]
                })
            })
            .count();
        assert!(reused >= 1, "{new_frames:?}");
        let spans: u32 = new_frames.iter().map(|frame| frame.targets).sum();
        assert_eq!(spans, 12);
    }
}
