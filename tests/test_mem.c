/* The memory ledger: current and peak bytes per category and place, the
 * peak of the total, tracking memory obtained elsewhere, and the edge cases
 * of the allocator (zero bytes, overflowing arrays). Check forks per test,
 * so each test starts from mem_reset() in its own process. */
#include <check.h>
#include <stdint.h>
#include <string.h>

#include "mem.h"
#include "suites.h"

static void assert_all_zero(void)
{
    for (int p = 0; p < MEM_PLACE_COUNT; p++)
        for (int c = 0; c < MEM_CATEGORY_COUNT; c++)
            ck_assert_msg(mem_current((MemCategory)c, (MemPlace)p) == 0, "category %s place %d: %zu bytes left",
                          mem_category_name((MemCategory)c), p, mem_current((MemCategory)c, (MemPlace)p));
}

START_TEST(current_and_peak_per_category)
{
    mem_reset();
    void *w = mem_alloc(MEM_WEIGHTS, 1000);
    void *a1 = mem_alloc(MEM_ACTIVATIONS, 300);
    void *a2 = mem_alloc(MEM_ACTIVATIONS, 200);
    void *k = mem_alloc(MEM_KV, 4096);
    void *m = mem_alloc(MEM_KV_METADATA, 16);
    ck_assert(w && a1 && a2 && k && m);
    ck_assert_uint_eq(mem_current(MEM_WEIGHTS, MEM_HOST), 1000);
    ck_assert_uint_eq(mem_current(MEM_ACTIVATIONS, MEM_HOST), 500);
    ck_assert_uint_eq(mem_current(MEM_KV, MEM_HOST), 4096);
    ck_assert_uint_eq(mem_current(MEM_KV_METADATA, MEM_HOST), 16);
    /* Host allocations never show up on the device. */
    for (int c = 0; c < MEM_CATEGORY_COUNT; c++)
        ck_assert_uint_eq(mem_current((MemCategory)c, MEM_DEVICE), 0);

    mem_free(a1);
    ck_assert_uint_eq(mem_current(MEM_ACTIVATIONS, MEM_HOST), 200);
    ck_assert_uint_eq(mem_peak(MEM_ACTIVATIONS, MEM_HOST), 500);
    void *a3 = mem_alloc(MEM_ACTIVATIONS, 250); /* 450: below the old peak */
    ck_assert_uint_eq(mem_peak(MEM_ACTIVATIONS, MEM_HOST), 500);
    void *a4 = mem_alloc(MEM_ACTIVATIONS, 100); /* 550: a new peak */
    ck_assert_uint_eq(mem_peak(MEM_ACTIVATIONS, MEM_HOST), 550);
    ck_assert_uint_eq(mem_size(a3), 250);
    ck_assert_uint_eq(mem_size(NULL), 0);

    void *bufs[] = {w, a2, a3, a4, k, m};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        mem_free(bufs[i]);
    assert_all_zero();
    /* Peaks survive the frees. */
    ck_assert_uint_eq(mem_peak(MEM_WEIGHTS, MEM_HOST), 1000);
    ck_assert_uint_eq(mem_peak(MEM_KV, MEM_HOST), 4096);
    ck_assert_uint_eq(mem_peak(MEM_KV_METADATA, MEM_HOST), 16);
}
END_TEST

/* Two categories whose peaks happen at different moments: the total's peak
 * is the largest simultaneous sum, not the sum of the peaks. */
START_TEST(peak_of_sum_is_not_sum_of_peaks)
{
    mem_reset();
    void *w = mem_alloc(MEM_WEIGHTS, 100);
    mem_free(w);
    void *a = mem_alloc(MEM_ACTIVATIONS, 200);
    ck_assert_uint_eq(mem_peak(MEM_WEIGHTS, MEM_HOST), 100);
    ck_assert_uint_eq(mem_peak(MEM_ACTIVATIONS, MEM_HOST), 200);
    ck_assert_uint_eq(mem_peak_total(MEM_HOST), 200); /* not 300 */
    void *k = mem_alloc(MEM_KV, 50);
    ck_assert_uint_eq(mem_peak_total(MEM_HOST), 250);
    mem_free(a);
    mem_free(k);
    ck_assert_uint_eq(mem_peak_total(MEM_HOST), 250);
    ck_assert_uint_eq(mem_peak_total(MEM_DEVICE), 0);
}
END_TEST

START_TEST(track_and_untrack)
{
    mem_reset();
    mem_track(MEM_WEIGHTS, MEM_HOST, 1u << 20);     /* an mmap */
    mem_track(MEM_KV, MEM_DEVICE, 3u << 20);        /* a cudaMalloc */
    mem_track(MEM_KV_METADATA, MEM_DEVICE, 4096);
    ck_assert_uint_eq(mem_current(MEM_WEIGHTS, MEM_HOST), 1u << 20);
    ck_assert_uint_eq(mem_current(MEM_KV, MEM_DEVICE), 3u << 20);
    ck_assert_uint_eq(mem_current(MEM_KV, MEM_HOST), 0);
    ck_assert_uint_eq(mem_peak_total(MEM_DEVICE), (3u << 20) + 4096);
    ck_assert_uint_eq(mem_peak_total(MEM_HOST), 1u << 20);
    /* Tracked memory is not a mem_alloc() buffer. */
    ck_assert_int_eq(mem_live_buffers(), 0);

    mem_untrack(MEM_KV, MEM_DEVICE, 1u << 20);
    ck_assert_uint_eq(mem_current(MEM_KV, MEM_DEVICE), 2u << 20);
    ck_assert_uint_eq(mem_peak(MEM_KV, MEM_DEVICE), 3u << 20);
    mem_track(MEM_KV, MEM_DEVICE, 512);
    ck_assert_uint_eq(mem_peak_total(MEM_DEVICE), (3u << 20) + 4096); /* 2 MiB + 4608 is less */
    mem_untrack(MEM_KV, MEM_DEVICE, (2u << 20) + 512);
    mem_untrack(MEM_KV_METADATA, MEM_DEVICE, 4096);
    mem_untrack(MEM_WEIGHTS, MEM_HOST, 1u << 20);
    assert_all_zero();
}
END_TEST

START_TEST(zero_size_alloc)
{
    mem_reset();
    void *p = mem_alloc(MEM_ACTIVATIONS, 0);
    ck_assert_ptr_nonnull(p);
    ck_assert_uint_eq(mem_size(p), 0);
    ck_assert_uint_eq(mem_current(MEM_ACTIVATIONS, MEM_HOST), 0);
    ck_assert_int_eq(mem_live_buffers(), 1);
    void *q = mem_alloc_array(MEM_KV, 0, 16);
    void *r = mem_alloc_array(MEM_KV, 16, 0);
    ck_assert(q && r && q != p && r != q);
    mem_free(p);
    mem_free(q);
    mem_free(r);
    ck_assert_int_eq(mem_live_buffers(), 0);
}
END_TEST

START_TEST(swap_place_is_counted_apart)
{
    /* A swap space is host memory the ledger counts as its own place: the
     * host's columns do not see it, and mem_free() takes it off the same
     * place. */
    mem_reset();
    void *h = mem_alloc(MEM_KV, 1000);
    void *s = mem_alloc_at(MEM_KV, MEM_SWAP, 4000);
    void *m = mem_alloc_at(MEM_KV_METADATA, MEM_SWAP, 40);
    ck_assert(h && s && m);
    ck_assert_uint_eq(mem_size(s), 4000);
    ck_assert_uint_eq(mem_current(MEM_KV, MEM_HOST), 1000);
    ck_assert_uint_eq(mem_current(MEM_KV, MEM_SWAP), 4000);
    ck_assert_uint_eq(mem_current(MEM_KV_METADATA, MEM_SWAP), 40);
    ck_assert_uint_eq(mem_peak_total(MEM_HOST), 1000);
    ck_assert_uint_eq(mem_peak_total(MEM_SWAP), 4040);
    ck_assert_uint_eq(mem_peak_total(MEM_DEVICE), 0);
    mem_free(s);
    ck_assert_uint_eq(mem_current(MEM_KV, MEM_SWAP), 0);
    ck_assert_uint_eq(mem_peak(MEM_KV, MEM_SWAP), 4000);
    ck_assert_uint_eq(mem_current(MEM_KV, MEM_HOST), 1000);
    mem_free(m);
    mem_free(h);
    ck_assert_int_eq(mem_live_buffers(), 0);
    assert_all_zero();
}
END_TEST

START_TEST(overflow_returns_null)
{
    mem_reset();
    ck_assert_ptr_null(mem_alloc_array(MEM_KV, SIZE_MAX / 2, 4));
    ck_assert_ptr_null(mem_alloc_array(MEM_KV, (SIZE_MAX >> 20) + 1, 1u << 20));
    ck_assert_ptr_null(mem_alloc(MEM_KV, SIZE_MAX));
    ck_assert_ptr_null(mem_alloc(MEM_KV, SIZE_MAX - 8));
    /* A failed allocation charges nothing and leaves no buffer behind. */
    ck_assert_uint_eq(mem_current(MEM_KV, MEM_HOST), 0);
    ck_assert_uint_eq(mem_peak(MEM_KV, MEM_HOST), 0);
    ck_assert_int_eq(mem_live_buffers(), 0);
    /* The largest product that does not overflow is still computed exactly:
     * 3 x 5 elements of 7 bytes. */
    void *p = mem_alloc_array(MEM_KV, 15, 7);
    ck_assert_uint_eq(mem_size(p), 105);
    mem_free(p);
}
END_TEST

START_TEST(aligned_zeroed_and_live_count)
{
    mem_reset();
    enum { N = 37 };
    void *bufs[N];
    for (int i = 0; i < N; i++) {
        size_t bytes = (size_t)(i * 13 + 1);
        bufs[i] = mem_alloc((MemCategory)(i % MEM_CATEGORY_COUNT), bytes);
        ck_assert_ptr_nonnull(bufs[i]);
        ck_assert_msg((uintptr_t)bufs[i] % MEM_ALIGN == 0, "buffer %d is not %d-byte aligned", i, MEM_ALIGN);
        const unsigned char *b = bufs[i];
        for (size_t j = 0; j < bytes; j++)
            ck_assert_msg(b[j] == 0, "buffer %d byte %zu is not zeroed", i, j);
        memset(bufs[i], 0xAB, bytes); /* the whole size is writable */
        ck_assert_int_eq(mem_live_buffers(), i + 1);
    }
    for (int i = N - 1; i >= 0; i--)
        mem_free(bufs[i]);
    mem_free(NULL); /* ignored */
    ck_assert_int_eq(mem_live_buffers(), 0);
    assert_all_zero();
}
END_TEST

START_TEST(reset_clears_everything)
{
    void *p = mem_alloc(MEM_KV, 64);
    mem_track(MEM_KV, MEM_DEVICE, 64);
    mem_reset();
    ck_assert_uint_eq(mem_peak(MEM_KV, MEM_HOST), 0);
    ck_assert_uint_eq(mem_peak_total(MEM_DEVICE), 0);
    ck_assert_int_eq(mem_live_buffers(), 0);
    /* The forgotten buffer is still valid memory; free it without the ledger
     * going below zero in a way that would matter to the test. */
    ck_assert_uint_eq(mem_size(p), 64);
    mem_track(MEM_KV, MEM_HOST, 64);
    mem_free(p);
    ck_assert_uint_eq(mem_current(MEM_KV, MEM_HOST), 0);
}
END_TEST

START_TEST(category_names)
{
    ck_assert_str_eq(mem_category_name(MEM_WEIGHTS), "weights");
    ck_assert_str_eq(mem_category_name(MEM_ACTIVATIONS), "activations");
    ck_assert_str_eq(mem_category_name(MEM_KV), "kv");
    ck_assert_str_eq(mem_category_name(MEM_KV_METADATA), "kv_metadata");
    ck_assert_str_eq(mem_category_name(MEM_CATEGORY_COUNT), "?");
}
END_TEST

Suite *suite_mem(void)
{
    Suite *s = suite_create("mem");
    TCase *tc = tcase_create("ledger");
    tcase_add_test(tc, current_and_peak_per_category);
    tcase_add_test(tc, peak_of_sum_is_not_sum_of_peaks);
    tcase_add_test(tc, track_and_untrack);
    tcase_add_test(tc, zero_size_alloc);
    tcase_add_test(tc, swap_place_is_counted_apart);
    tcase_add_test(tc, overflow_returns_null);
    tcase_add_test(tc, aligned_zeroed_and_live_count);
    tcase_add_test(tc, reset_clears_everything);
    tcase_add_test(tc, category_names);
    suite_add_tcase(s, tc);
    return s;
}

REGISTER_SUITE(mem)
