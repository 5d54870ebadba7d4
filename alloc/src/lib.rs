//! The global allocator of the `spex` binary and of the sweep's tests: mimalloc.
//!
//! The sweep allocates and frees on every simulated operation, and mimalloc judges its images
//! faster than the system allocator. Every Rust allocation comes with an alignment; mimalloc's
//! aligned entry points take their fast path only when the block size class a request rounds
//! to is a power of two, and otherwise allocate a larger block and align inside it (an extra
//! call, and a block of another size class than the same request without an alignment gets).
//! Its size classes are multiples of 8 bytes and start 16-aligned in their page, and a size that
//! is a multiple of 16 rounds to a class that is one too (16, 32, 48, 64, then classes a
//! sixteenth of a power of two apart), so a request aligned to at most 8, or to 16 with a size
//! that is a multiple of 16, is already aligned in the class its size rounds to: it is asked
//! without an alignment.
//! Every other request goes through the aligned entry points. On the sweep this takes 4 % fewer
//! instructions (BENCHMARKS.md, "Crash sweep throughput").
//!
//! Nothing here is on a crash path: the allocator holds no state of its own.

#![expect(unsafe_code, reason = "a global allocator is an unsafe trait; its calls into mimalloc")]

use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;

/// mimalloc as the global allocator (see the crate header).
#[derive(Debug)]
pub struct Mimalloc;

/// Whether a block of `size` bytes from mimalloc's plain entry points is aligned to `align`.
fn natural(size: usize, align: usize) -> bool {
    align <= 8 || (align == 16 && size.is_multiple_of(16))
}

/// A new block for `layout`: from `plain`, mimalloc's entry point without an alignment, where
/// the size class gives the alignment (see `natural`), else from its aligned twin `aligned`.
///
/// # Safety
///
/// `plain` and `aligned` are one of mimalloc's pairs of allocation entry points (`mi_malloc`
/// and `mi_malloc_aligned`, or `mi_zalloc` and `mi_zalloc_aligned`).
#[inline]
unsafe fn new_block(
    layout: Layout,
    plain: unsafe extern "C" fn(usize) -> *mut c_void,
    aligned: unsafe extern "C" fn(usize, usize) -> *mut c_void,
) -> *mut u8 {
    let (size, align) = (layout.size(), layout.align());
    // SAFETY: mimalloc's entry points take any size and a power-of-two alignment.
    let block = unsafe { if natural(size, align) { plain(size) } else { aligned(size, align) } };
    debug_assert!(block.is_null() || (block as usize).is_multiple_of(align), "aligned");
    block.cast()
}

// SAFETY: every block comes from mimalloc, aligned as the layout asks (plain entry points only
// where its size classes give that alignment: see `natural`), and goes back to `mi_free`.
unsafe impl GlobalAlloc for Mimalloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: mimalloc's pair of allocation entry points.
        unsafe { new_block(layout, libmimalloc_sys::mi_malloc, libmimalloc_sys::mi_malloc_aligned) }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: mimalloc's pair of zeroing allocation entry points.
        unsafe { new_block(layout, libmimalloc_sys::mi_zalloc, libmimalloc_sys::mi_zalloc_aligned) }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        // SAFETY: `ptr` came from this allocator, so from mimalloc.
        unsafe { libmimalloc_sys::mi_free(ptr.cast()) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let align = layout.align();
        // SAFETY: `ptr` came from this allocator with `layout`; a block moved keeps the bytes.
        let block = unsafe {
            if natural(new_size, align) {
                libmimalloc_sys::mi_realloc(ptr.cast(), new_size)
            } else {
                libmimalloc_sys::mi_realloc_aligned(ptr.cast(), new_size, align)
            }
        };
        debug_assert!(block.is_null() || (block as usize).is_multiple_of(align), "aligned");
        block.cast()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every size up to a few pages (and a few larger), at every alignment up to a page:
    /// each block is aligned as asked; a zeroed one reads zeros; a block grown, then shrunk,
    /// stays aligned and keeps its bytes.
    #[test]
    fn every_block_is_aligned_as_asked_and_keeps_its_bytes() {
        let sizes = (1usize..=256).chain((257..=20_000).step_by(61)).chain([65_536, 1 << 20]);
        for size in sizes {
            for align in (0..=12).map(|shift| 1usize << shift) {
                let layout = |size| Layout::from_size_align(size, align).expect("a valid layout");
                let aligned =
                    |block: *mut u8| !block.is_null() && (block as usize).is_multiple_of(align);
                let (grown, shrunk) = (size * 2 + 16, size.div_ceil(2));
                // SAFETY: non-zero sizes; each block is used within its size and freed (or
                // resized) with the layout it was made with.
                unsafe {
                    let zeroed = Mimalloc.alloc_zeroed(layout(size));
                    assert!(aligned(zeroed), "{size} at {align}");
                    assert!(std::slice::from_raw_parts(zeroed, size).iter().all(|&b| b == 0));
                    Mimalloc.dealloc(zeroed, layout(size));

                    let block = Mimalloc.alloc(layout(size));
                    assert!(aligned(block), "{size} at {align}");
                    block.write_bytes(0xa5, size);
                    let block = Mimalloc.realloc(block, layout(size), grown);
                    assert!(aligned(block), "{size} grown to {grown} at {align}");
                    assert!(std::slice::from_raw_parts(block, size).iter().all(|&b| b == 0xa5));
                    block.write_bytes(0x5a, grown);
                    let block = Mimalloc.realloc(block, layout(grown), shrunk);
                    assert!(aligned(block), "{grown} shrunk to {shrunk} at {align}");
                    assert!(std::slice::from_raw_parts(block, shrunk).iter().all(|&b| b == 0x5a));
                    Mimalloc.dealloc(block, layout(shrunk));
                }
            }
        }
    }
}
