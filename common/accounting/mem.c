#define _GNU_SOURCE /* sysconf(_SC_PHYS_PAGES) */
#include "mem.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Each mem_alloc() buffer is preceded by one cache line that remembers what
 * it was charged to, so that mem_free() can take it off the ledger without
 * the caller repeating the size. */
typedef struct {
    void *raw; /* what calloc() returned, for free() */
    size_t bytes;
    int category;
    int place;
    uint32_t magic;
} AllocHeader;

#define HEADER_BYTES MEM_ALIGN
#define HEADER_MAGIC 0x6b766c62u /* "kvlb" */

static AllocHeader *header_of(const void *p);

typedef struct {
    size_t current[MEM_PLACE_COUNT][MEM_CATEGORY_COUNT];
    size_t peak[MEM_PLACE_COUNT][MEM_CATEGORY_COUNT];
    size_t total[MEM_PLACE_COUNT];
    size_t total_peak[MEM_PLACE_COUNT];
    long live_buffers;
} Ledger;

static Ledger ledger;

void mem_track(MemCategory cat, MemPlace place, size_t bytes)
{
    size_t *cur = &ledger.current[place][cat];
    *cur += bytes;
    if (*cur > ledger.peak[place][cat])
        ledger.peak[place][cat] = *cur;
    ledger.total[place] += bytes;
    if (ledger.total[place] > ledger.total_peak[place])
        ledger.total_peak[place] = ledger.total[place];
}

void mem_untrack(MemCategory cat, MemPlace place, size_t bytes)
{
    ledger.current[place][cat] -= bytes;
    ledger.total[place] -= bytes;
}

void *mem_alloc(MemCategory cat, size_t bytes)
{
    return mem_alloc_at(cat, MEM_HOST, bytes);
}

void *mem_alloc_at(MemCategory cat, MemPlace place, size_t bytes)
{
    /* One buffer larger than the machine's memory can never be used: say
     * "out of memory" now rather than when it is first written (or being
     * killed for it, where the system overcommits). */
    static size_t physical;
    if (physical == 0)
        physical = mem_physical_bytes();
    if (bytes > SIZE_MAX - 2 * MEM_ALIGN || (physical && bytes > physical))
        return NULL;
    /* calloc(), not malloc() and memset(): a large buffer comes straight
     * from the kernel (mmap), already zero, and calloc() leaves it
     * untouched, so its pages become resident only when they are first
     * written. A K/V pool sized for many full-length requests costs memory
     * only for the positions used (a memset here made the default SmolLM2
     * budget of 2.81 GiB resident at start). Room for one alignment step
     * is added: the header and the buffer sit on cache lines. */
    char *raw = calloc(1, 2 * MEM_ALIGN + bytes);
    if (!raw)
        return NULL;
    char *p = raw + HEADER_BYTES + (MEM_ALIGN - (uintptr_t)(raw + HEADER_BYTES) % MEM_ALIGN) % MEM_ALIGN;
    AllocHeader *h = header_of(p);
    h->raw = raw;
    h->bytes = bytes;
    h->category = (int)cat;
    h->place = (int)place;
    h->magic = HEADER_MAGIC;
    mem_track(cat, place, bytes);
    ledger.live_buffers++;
    return p;
}

void *mem_alloc_array(MemCategory cat, size_t count, size_t elem_size)
{
    if (elem_size != 0 && count > SIZE_MAX / elem_size)
        return NULL;
    return mem_alloc(cat, count * elem_size);
}

static AllocHeader *header_of(const void *p)
{
    return (AllocHeader *)((char *)p - HEADER_BYTES);
}

void mem_free(void *p)
{
    if (!p)
        return;
    AllocHeader *h = header_of(p);
    if (h->magic != HEADER_MAGIC)
        abort(); /* not ours, or freed twice: a bug, never input */
    h->magic = 0;
    mem_untrack((MemCategory)h->category, (MemPlace)h->place, h->bytes);
    ledger.live_buffers--;
    free(h->raw);
}

size_t mem_size(const void *p)
{
    return p ? header_of(p)->bytes : 0;
}

size_t mem_current(MemCategory cat, MemPlace place) { return ledger.current[place][cat]; }
size_t mem_peak(MemCategory cat, MemPlace place) { return ledger.peak[place][cat]; }
size_t mem_peak_total(MemPlace place) { return ledger.total_peak[place]; }
long mem_live_buffers(void) { return ledger.live_buffers; }

void mem_reset(void)
{
    memset(&ledger, 0, sizeof ledger);
}

const char *mem_category_name(MemCategory cat)
{
    static const char *names[MEM_CATEGORY_COUNT] = {
        "weights", "activations", "kv", "kv_metadata"};
    return (unsigned)cat < MEM_CATEGORY_COUNT ? names[cat] : "?";
}

size_t mem_physical_bytes(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? (size_t)pages * (size_t)page : 0;
}

size_t mem_available_bytes(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    unsigned long long kib = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kib) == 1)
            break;
    if (f)
        fclose(f);
    return kib ? (size_t)(kib * 1024ull) : mem_physical_bytes();
}
