/*
 * fuzz.h - what the libFuzzer targets share: the profiles directory and
 * a scratch file under a private temporary directory for the parsers
 * that read only from a path.
 */
#ifndef AR_FUZZ_H
#define AR_FUZZ_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* $AR_PROFILES, else the source tree's profiles/. */
const char *fuzz_profiles_dir(void);

/*
 * fuzz_scratch_dir() - a directory made once per process (under
 * $TMPDIR, removed at exit).  Aborts when it cannot be made.
 */
const char *fuzz_scratch_dir(void);

/* fuzz_write() - replace @path with @size bytes of @data; aborts on error. */
void fuzz_write(const char *path, const void *data, size_t size);

#endif /* AR_FUZZ_H */
