//! Per-thread scratch arenas for parsing: a file's syntax tree is allocated by bumping a
//! pointer, and discarded all at once when the file is summarised, instead of through one
//! `malloc` and one `free` per node.
//!
//! Kept because it wins by more than 5% (bench/alloc_json.sh, 2026-11-24, whole scientific
//! site-packages, 8,526 files, median of 5 interleaved turns): mimalloc alone takes 1.27x the
//! wall time of this arena over mimalloc (1.26x the CPU), the system allocator 1.30x.
//!
//! A syntax tree is only read once, by the extractor, then thrown away; on a whole
//! site-packages its allocations and its drop were ~11% of the analyzer's CPU time. The arena
//! is used only when the program's global allocator is [`ScratchAlloc`] (the `lfm` binary's is)
//! and an address range could be reserved; otherwise [`run`] runs its work with ordinary
//! allocations and drops what it discards, so results never depend on it.
//!
//! Memory is reserved once per process as one range split into per-thread slots (256 MiB each,
//! without backing: pages only count once written); a thread's slot goes to another thread
//! when it exits. A file whose tree outgrows its slot goes on in the wrapped allocator. After a
//! file, pages above the first 4 MiB of the slot are given back to the kernel, and all of them
//! when parsing is over ([`release_all`]). No arena is used under a finite address-space limit
//! (`ulimit -v`), where reserving would eat into the budget the work itself needs.

use std::alloc::{GlobalAlloc, Layout};
use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

/// Bytes reserved per thread.
const SLOT_BYTES: usize = 256 << 20;
/// Bytes of a slot kept resident between files (most files' trees are far smaller). Loading
/// runs beside the parse ([`crate::preparse`]), so what the slots keep adds to its peak: on a
/// whole site-packages 16 MiB per slot put ~10 MiB more at the peak than 4 MiB does, and 4 MiB
/// costs ~5% more page faults than 16 (1 MiB: over twice as many).
const KEEP_BYTES: usize = 4 << 20;
/// Threads beyond this many use ordinary allocations.
const MAX_SLOTS: usize = 64;

/// The reserved range, `[start, end)`; both 0 until reserved (and when reserving failed).
static REGION_START: AtomicUsize = AtomicUsize::new(0);
static REGION_END: AtomicUsize = AtomicUsize::new(0);
static NEXT_SLOT: AtomicUsize = AtomicUsize::new(0);
/// Each slot's state, so that [`release_all`] never gives back pages a run is using.
static SLOT_STATE: [AtomicU8; MAX_SLOTS] = [const { AtomicU8::new(IDLE) }; MAX_SLOTS];
const IDLE: u8 = 0;
const RUNNING: u8 = 1;
const RELEASING: u8 = 2;
/// A run panicked in it: its pages may hold the panic's payload, so it is never reused.
const RETIRED: u8 = 3;
static RESERVED: OnceLock<Option<(usize, usize)>> = OnceLock::new();

thread_local! {
    /// This thread's slot: its start (0: none yet), and `usize::MAX` once it is unusable.
    static SLOT_BASE: Cell<usize> = const { Cell::new(0) };
    static SLOT_INDEX: Cell<usize> = const { Cell::new(0) };
    /// While a [`run`] is allocating in the arena (not within [`Scratch::outside`]).
    static ACTIVE: Cell<bool> = const { Cell::new(false) };
    /// While a [`run`] with the arena is under way (a nested one must not reset it).
    static IN_RUN: Cell<bool> = const { Cell::new(false) };
    static CURSOR: Cell<usize> = const { Cell::new(0) };
    static LIMIT: Cell<usize> = const { Cell::new(0) };
    /// The highest cursor since the last reset (what to give back).
    static HIGH: Cell<usize> = const { Cell::new(0) };
    /// Some allocation of the current run did not fit and went to the wrapped allocator.
    static OVERFLOWED: Cell<bool> = const { Cell::new(false) };
    /// `ScratchAlloc` served an allocation on this thread, i.e. it is the global allocator.
    static INSTALLED: Cell<bool> = const { Cell::new(false) };
}

/// A global allocator that serves [`run`]'s allocations from the thread's scratch arena and
/// everything else from the allocator it wraps.
pub struct ScratchAlloc<A>(pub A);

fn in_region(address: usize) -> bool {
    address >= REGION_START.load(Ordering::Relaxed) && address < REGION_END.load(Ordering::Relaxed)
}

/// Whether `address + size` is the end of the latest block of this thread's active arena.
fn is_latest(address: usize, size: usize) -> bool {
    ACTIVE.get() && address + size == CURSOR.get() && address >= LIMIT.get() - SLOT_BYTES
}

/// Whether `pointer` was allocated in a scratch arena (for tests and diagnostics).
pub fn is_scratch(pointer: *const u8) -> bool {
    in_region(pointer as usize)
}

/// No scratch arena on this thread from now on: [`run`] allocates normally here.
pub fn disable_on_this_thread() {
    SLOT_BASE.set(usize::MAX);
    let _ = CLAIM.try_with(|claim| claim.borrow_mut().take());
}

/// Bump-allocate `layout` in the active arena, or `None` when it does not fit.
fn bump(layout: Layout) -> Option<*mut u8> {
    let start = CURSOR.get().checked_add(layout.align() - 1)? & !(layout.align() - 1);
    let end = start.checked_add(layout.size())?;
    if end > LIMIT.get() {
        OVERFLOWED.set(true);
        return None;
    }
    CURSOR.set(end);
    if end > HIGH.get() {
        HIGH.set(end);
    }
    Some(start as *mut u8)
}

unsafe impl<A: GlobalAlloc> GlobalAlloc for ScratchAlloc<A> {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if ACTIVE.get() {
            if let Some(pointer) = bump(layout) {
                return pointer;
            }
        } else {
            INSTALLED.set(true);
        }
        self.0.alloc(layout)
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if ACTIVE.get() {
            if let Some(pointer) = bump(layout) {
                // The slot is reused from file to file: its bytes are not zero.
                std::ptr::write_bytes(pointer, 0, layout.size());
                return pointer;
            }
        }
        self.0.alloc_zeroed(layout)
    }

    #[inline]
    unsafe fn dealloc(&self, pointer: *mut u8, layout: Layout) {
        let address = pointer as usize;
        if in_region(address) {
            // Freed with the whole arena; the latest block is handed back at once (a vector
            // built and dropped in passing).
            if is_latest(address, layout.size()) {
                CURSOR.set(address);
            }
            return;
        }
        self.0.dealloc(pointer, layout)
    }

    #[inline]
    unsafe fn realloc(&self, pointer: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let address = pointer as usize;
        if !in_region(address) {
            // Blocks from outside stay outside, even while the arena is active.
            return self.0.realloc(pointer, layout, new_size);
        }
        if is_latest(address, layout.size()) && address + new_size <= LIMIT.get() {
            // The latest block grows (or shrinks) in place.
            let end = address + new_size;
            CURSOR.set(end);
            if end > HIGH.get() {
                HIGH.set(end);
            }
            return pointer;
        }
        if new_size <= layout.size() {
            // A block shrinks where it is (the parser shrinks its token vector to fit): the
            // bytes given up are freed with the arena anyway.
            return pointer;
        }
        let new_layout = Layout::from_size_align_unchecked(new_size, layout.align());
        let moved = self.alloc(new_layout);
        if !moved.is_null() {
            std::ptr::copy_nonoverlapping(pointer, moved, layout.size().min(new_size));
            self.dealloc(pointer, layout);
        }
        moved
    }
}

/// Reserve the process's range (once), sized for this machine's threads.
fn reserve() -> Option<(usize, usize)> {
    *RESERVED.get_or_init(|| {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes the struct it is given.
        let limited = unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut limit) } != 0
            || limit.rlim_cur != libc::RLIM_INFINITY;
        if limited {
            return None;
        }
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        let slots = (threads + 2).min(MAX_SLOTS);
        let bytes = slots * SLOT_BYTES;
        // SAFETY: a fresh private anonymous mapping, touching no existing memory.
        let start = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if start == libc::MAP_FAILED {
            return None;
        }
        // Huge pages would make each reset's give-back and each re-fault zero 2 MiB at a time.
        // SAFETY: advice on the mapping made above.
        unsafe { libc::madvise(start, bytes, libc::MADV_NOHUGEPAGE) };
        let start = start as usize;
        REGION_START.store(start, Ordering::Relaxed);
        REGION_END.store(start + bytes, Ordering::Relaxed);
        Some((start, slots))
    })
}

/// Slots of threads that have exited, ready for new threads.
static FREE_SLOTS: Mutex<Vec<usize>> = Mutex::new(Vec::new());

/// A thread's claim on its slot: on exit the slot's pages go back to the kernel and the slot
/// to [`FREE_SLOTS`], so that short-lived threads do not use up the range.
struct SlotClaim {
    index: usize,
    base: usize,
}

impl Drop for SlotClaim {
    fn drop(&mut self) {
        // SAFETY: the slot is this exiting thread's, and no run is under way on it.
        unsafe {
            libc::madvise(
                self.base as *mut libc::c_void,
                SLOT_BYTES,
                libc::MADV_DONTNEED,
            )
        };
        if let Ok(mut free) = FREE_SLOTS.lock() {
            free.push(self.index);
        }
    }
}

thread_local! {
    static CLAIM: RefCell<Option<SlotClaim>> = const { RefCell::new(None) };
}

/// This thread's slot start, claiming one on first use; `None` without an arena.
fn slot() -> Option<usize> {
    match SLOT_BASE.get() {
        usize::MAX => return None,
        0 => {}
        base => return Some(base),
    }
    // Whether `ScratchAlloc` is the global allocator shows once this thread allocates.
    drop(std::hint::black_box(Box::new(0u8)));
    let claimed = if INSTALLED.get() {
        reserve().and_then(|(start, slots)| {
            let reused = FREE_SLOTS.lock().ok().and_then(|mut free| free.pop());
            let index = reused.or_else(|| {
                let index = NEXT_SLOT.fetch_add(1, Ordering::Relaxed);
                (index < slots).then_some(index)
            })?;
            let base = start + index * SLOT_BYTES;
            SLOT_INDEX.set(index);
            CLAIM.with(|claim| *claim.borrow_mut() = Some(SlotClaim { index, base }));
            Some(base)
        })
    } else {
        None
    };
    SLOT_BASE.set(claimed.unwrap_or(usize::MAX));
    claimed
}

/// Inside [`run`]: how to keep a result and discard the rest.
pub struct Scratch {
    arena: bool,
}

impl Scratch {
    /// Evaluate `make` with ordinary allocations: what it returns may outlive the run.
    pub fn outside<R>(&self, make: impl FnOnce() -> R) -> R {
        if !self.arena {
            return make();
        }
        ACTIVE.set(false);
        let made = make();
        ACTIVE.set(true);
        made
    }

    /// Discard `value`: forgotten when it lives in the arena (freed with it), else dropped.
    pub fn discard<T>(&self, value: T) {
        if self.arena && !OVERFLOWED.get() {
            std::mem::forget(value);
        } else {
            drop(value);
        }
    }

    /// Whether allocations go to an arena (for tests and diagnostics).
    pub fn uses_arena(&self) -> bool {
        self.arena
    }
}

/// Ends a run: the arena goes inactive; after a panic, this thread's arena is never used again
/// (the panic's payload may live in it).
struct EndRun;

impl Drop for EndRun {
    fn drop(&mut self) {
        ACTIVE.set(false);
        IN_RUN.set(false);
        let state = &SLOT_STATE[SLOT_INDEX.get()];
        if std::thread::panicking() {
            state.store(RETIRED, Ordering::Release);
            SLOT_BASE.set(usize::MAX);
            // Never handed to another thread either.
            let _ = CLAIM.try_with(|claim| claim.borrow_mut().take().map(std::mem::forget));
        } else {
            state.store(IDLE, Ordering::Release);
        }
    }
}

/// Run `work` with this thread's allocations in its scratch arena (when there is one), then
/// free the arena at once.
///
/// # Safety
/// Nothing allocated by `work` outside [`Scratch::outside`] may be used after `work` returns:
/// in particular what it returns must be made inside [`Scratch::outside`], and it must not
/// store new allocations into values that outlive it.
pub unsafe fn run<R>(work: impl FnOnce(&Scratch) -> R) -> R {
    let base = if IN_RUN.get() { None } else { slot() };
    let claimed = base.filter(|_| {
        SLOT_STATE[SLOT_INDEX.get()]
            .compare_exchange(IDLE, RUNNING, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    });
    let Some(base) = claimed else {
        // No arena, or its pages are being given back just now.
        return work(&Scratch { arena: false });
    };
    CURSOR.set(base);
    HIGH.set(base);
    LIMIT.set(base + SLOT_BYTES);
    OVERFLOWED.set(false);
    IN_RUN.set(true);
    ACTIVE.set(true);
    let end = EndRun;
    let result = work(&Scratch { arena: true });
    drop(end);
    let high = HIGH.get();
    if high > base + KEEP_BYTES {
        // SAFETY: the range is this thread's slot, past what is kept, and nothing in it is used.
        unsafe {
            libc::madvise(
                (base + KEEP_BYTES) as *mut libc::c_void,
                high - (base + KEEP_BYTES),
                libc::MADV_DONTNEED,
            )
        };
    }
    CURSOR.set(base);
    HIGH.set(base);
    result
}

/// Give the pages of every arena not in use back to the kernel: they are kept between files,
/// not for what comes after parsing.
pub fn release_all() {
    let Some(&Some((start, slots))) = RESERVED.get() else {
        return;
    };
    for (index, state) in SLOT_STATE.iter().enumerate().take(slots) {
        if state
            .compare_exchange(IDLE, RELEASING, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            // SAFETY: the slot is idle and marked so no run starts in it until this is done.
            unsafe {
                libc::madvise(
                    (start + index * SLOT_BYTES) as *mut libc::c_void,
                    SLOT_BYTES,
                    libc::MADV_DONTNEED,
                )
            };
            state.store(IDLE, Ordering::Release);
        }
    }
}
