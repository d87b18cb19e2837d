/* GENERATED from solutions/ch04/paged_int8_load_head.c by scripts/make-exercises.sh.
 * Students: this is your copy. Write the regions marked TODO(lab ...),
 * then run `make lab CH=4`. Maintainers: edit the solution instead and
 * run `make exercises`; CI checks that the two agree. */
/* Chapter 4 lab: paged_int8_load_head(), one KV head of an int8 block slot
 * read back as f32: each code times its head's scale.
 * exercises/ch04/paged_int8_load_head.c is generated from this file by
 * scripts/make-exercises.sh; `make lab CH=4` grades yours. */
#include <string.h>

#include "ext/paged_dtype.h"
#include "lab.h"

void paged_int8_load_head(float *dst, const unsigned char *slot, int head, int n_heads, int head_dim)
{
    const int8_t *codes = (const int8_t *)slot;                              /* [n_heads][head_dim] */
    const unsigned char *scales = slot + (size_t)n_heads * (size_t)head_dim; /* [n_heads] f32 */
    // TODO(lab ch04.int8_load): the head's codes start at codes[head * head_dim]; its scale is the f32 at scales + head * sizeof(float) (memcpy it out: the slot is bytes); each value is (float)code x scale
    (void)codes; (void)scales; (void)head;
    memset(dst, 0, (size_t)head_dim * sizeof(float));
    LAB_TODO("read one head back: its codes times its own scale");
}
