//! The parse arenas (lfm_analyzer::scratch) with the arena allocator installed, as the `lfm`
//! binary has it: where blocks land, that memory is reused, that what is kept survives, and
//! that summaries come out the same with and without an arena.

// The vectors are the point: each is a heap block whose address the tests check.
#![allow(clippy::useless_vec)]

use std::path::{Path, PathBuf};

use lfm_analyzer::extract::summarize;
use lfm_analyzer::scratch::{self, ScratchAlloc};

#[global_allocator]
static ALLOCATOR: ScratchAlloc<std::alloc::System> = ScratchAlloc(std::alloc::System);

/// Runs `test` on a fresh thread, so that each test has its own slot and state.
fn on_thread<R: Send + 'static>(test: impl FnOnce() -> R + Send + 'static) -> R {
    std::thread::spawn(test).join().expect("test thread")
}

#[test]
fn blocks_made_in_a_run_are_in_the_arena_and_kept_ones_are_not() {
    on_thread(|| {
        // SAFETY: only the copies made in `outside` leave the runs.
        let (kept, first_addresses) = unsafe {
            scratch::run(|arena| {
                assert!(arena.uses_arena(), "the arena allocator is installed");
                let inside = vec![7u64; 1000];
                assert!(scratch::is_scratch(inside.as_ptr().cast()));
                let kept = arena.outside(|| inside.clone());
                assert!(!scratch::is_scratch(kept.as_ptr().cast()));
                let address = inside.as_ptr() as usize;
                arena.discard(inside);
                (kept, arena.outside(|| vec![address]))
            })
        };
        // A second run reuses the same memory, and writes over it: what was kept is intact.
        let second_address = unsafe {
            scratch::run(|arena| {
                let overwrite = vec![9u64; 1000];
                let address = overwrite.as_ptr() as usize;
                arena.discard(overwrite);
                address
            })
        };
        assert_eq!(
            first_addresses[0], second_address,
            "the arena is reset between runs"
        );
        assert_eq!(kept, vec![7u64; 1000]);
    });
}

#[test]
fn the_latest_block_grows_in_place_and_a_freed_latest_block_is_reused() {
    on_thread(|| unsafe {
        scratch::run(|arena| {
            let mut growing: Vec<u32> = Vec::with_capacity(4);
            let start = growing.as_ptr();
            for value in 0..100_000 {
                growing.push(value);
            }
            assert_eq!(growing.as_ptr(), start, "grown in place");
            assert!(growing.iter().copied().eq(0..100_000));
            let passing = vec![1u8; 64];
            let passing_address = passing.as_ptr();
            drop(passing);
            let next = vec![2u8; 64];
            assert_eq!(
                next.as_ptr(),
                passing_address,
                "the freed latest block is reused"
            );
            // A block that is not the latest moves when it grows, keeping its contents.
            let mut older = vec![3u16; 10];
            let _later = vec![4u8; 10];
            let before = older.as_ptr();
            older.extend(std::iter::repeat_n(5u16, 1000));
            assert_ne!(older.as_ptr(), before);
            assert_eq!(&older[..10], &[3u16; 10]);
            assert!(older[10..].iter().all(|&v| v == 5));
            // Any block shrinks in place, the latest or not.
            let _after = vec![1u8; 8];
            older.truncate(5);
            let before = older.as_ptr();
            older.shrink_to_fit();
            assert_eq!(older.as_ptr(), before, "shrunk in place");
            assert_eq!(older, vec![3u16; 5]);
            arena.discard(growing);
        })
    });
}

#[test]
fn what_does_not_fit_goes_to_the_wrapped_allocator_and_is_freed() {
    on_thread(|| unsafe {
        scratch::run(|arena| {
            // Larger than a slot (256 MiB); never touched, so it costs no memory.
            let huge: Vec<u8> = Vec::with_capacity(300 << 20);
            assert!(!scratch::is_scratch(huge.as_ptr()));
            let small = vec![1u8; 16];
            assert!(
                scratch::is_scratch(small.as_ptr()),
                "later small blocks still fit"
            );
            // Overflowed: discarding drops (and so frees the huge block) rather than forgets.
            arena.discard((huge, small));
        })
    });
}

#[test]
fn a_panic_in_a_run_retires_the_threads_arena() {
    on_thread(|| {
        let caught = std::panic::catch_unwind(|| unsafe {
            scratch::run(|arena| -> () {
                assert!(arena.uses_arena());
                panic!("{}", String::from("payload made in the arena"))
            })
        });
        let payload = caught.expect_err("the run panicked");
        assert_eq!(
            payload.downcast_ref::<String>().map(String::as_str),
            Some("payload made in the arena")
        );
        // The payload may live in the arena: it is never reset again on this thread.
        unsafe {
            scratch::run(|arena| {
                assert!(!arena.uses_arena());
                let block = vec![0u8; 32];
                assert!(!scratch::is_scratch(block.as_ptr()));
            })
        };
        assert_eq!(
            payload.downcast_ref::<String>().map(String::as_str),
            Some("payload made in the arena")
        );
    });
}

#[test]
fn a_nested_run_does_not_reset_the_outer_one() {
    on_thread(|| unsafe {
        scratch::run(|outer| {
            assert!(outer.uses_arena());
            let outer_block = vec![6u8; 100];
            let inner = scratch::run(|inner| {
                assert!(!inner.uses_arena(), "one arena per thread at a time");
                vec![1u8]
            });
            let after = vec![8u8; 100];
            assert_eq!(outer_block, vec![6u8; 100]);
            assert_eq!(after, vec![8u8; 100]);
            outer.outside(|| inner.len())
        })
    });
}

fn python_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("fixture directory").flatten() {
        let path = entry.path();
        if path.is_dir() {
            python_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "py") {
            out.push(path);
        }
    }
}

#[test]
fn summaries_are_the_same_with_and_without_an_arena() {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures");
    let mut files = Vec::new();
    python_files(&fixtures, &mut files);
    files.sort();
    assert!(files.len() > 20, "fixtures found: {}", files.len());
    let mut sources: Vec<String> = files
        .iter()
        .map(|path| String::from_utf8_lossy(&std::fs::read(path).unwrap()).into_owned())
        .collect();
    // And some that make the parser report errors and build long vectors.
    sources.push("def f(:\n  import os\nprint 'py2'\nclass C(\n".into());
    sources.push(format!("x = [{}]\nimport numpy\n", "1, ".repeat(200_000)));
    let plain_sources = sources.clone();
    let plain = on_thread(move || {
        scratch::disable_on_this_thread();
        plain_sources
            .iter()
            .map(|s| summarize(s))
            .collect::<Vec<_>>()
    });
    let arena = on_thread(move || {
        // Each file twice: the second time over the first one's leftovers.
        let first: Vec<_> = sources.iter().map(|s| summarize(s)).collect();
        let second: Vec<_> = sources.iter().map(|s| summarize(s)).collect();
        assert!(first == second);
        assert!(
            unsafe { scratch::run(|arena| arena.uses_arena()) },
            "this thread has an arena"
        );
        first
    });
    assert_eq!(plain.len(), arena.len());
    for (index, (a, b)) in plain.iter().zip(&arena).enumerate() {
        assert_eq!(a, b, "summary {index} differs");
    }
    assert!(plain.iter().any(|s| !s.problems.is_empty()));
}

/// How many of the pages of `[start, start + bytes)` are resident.
fn resident_pages(start: usize, bytes: usize) -> usize {
    let page = 4096;
    let start_page = start & !(page - 1);
    let pages = (start + bytes - start_page).div_ceil(page);
    let mut resident = vec![0u8; pages];
    // SAFETY: the range is mapped (part of the arena); the vector holds a byte per page.
    let status = unsafe {
        libc::mincore(
            start_page as *mut libc::c_void,
            pages * page,
            resident.as_mut_ptr(),
        )
    };
    assert_eq!(status, 0, "mincore: {}", std::io::Error::last_os_error());
    resident.iter().filter(|&&flags| flags & 1 != 0).count()
}

#[test]
fn pages_past_the_kept_part_go_back_after_a_run_and_all_of_them_on_release() {
    on_thread(|| {
        const MIB: usize = 1 << 20;
        let (start, bytes) = unsafe {
            scratch::run(|arena| {
                let touched = vec![1u8; 48 * MIB];
                let start = touched.as_ptr() as usize;
                assert!(resident_pages(start, 48 * MIB) >= 48 * MIB / 4096 - 1);
                arena.discard(touched);
                (start, 48 * MIB)
            })
        };
        let after_run = resident_pages(start, bytes);
        assert!(
            after_run <= 16 * MIB / 4096 + 1,
            "only the first 16 MiB stay: {after_run} pages resident"
        );
        assert!(after_run > 0, "the kept part stays for the next file");
        scratch::release_all();
        assert_eq!(resident_pages(start, bytes), 0, "released");
    });
}
