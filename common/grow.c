/* grow.c - the growable array of AR_GROW(). */
#include "config.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include "ar.h"

int ar_grow(void **vp, size_t *capp, size_t need, size_t size, size_t first)
{
	size_t cap = *capp ? *capp : (first ? first : 1);
	void *v;

	if (need <= *capp)
		return 0;
	while (cap < need) {
		if (cap > SIZE_MAX / 2)
			return -ENOMEM;
		cap *= 2;
	}
	if (size && cap > SIZE_MAX / size)
		return -ENOMEM;
	v = realloc(*vp, cap * size);
	if (!v)
		return -ENOMEM;
	*vp = v;
	*capp = cap;
	return 0;
}
