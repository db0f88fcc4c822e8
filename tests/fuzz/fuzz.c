/*
 * fuzz.c - helpers of the libFuzzer targets (fuzz.h).
 */
#include "config.h"

#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz.h"

static char scratch[PATH_MAX];

const char *fuzz_profiles_dir(void)
{
	const char *env = getenv("AR_PROFILES");

	return env && *env ? env : AR_SRC_PROFILES_DIR;
}

static void fuzz_scratch_remove(void)
{
	char cmd[PATH_MAX + 16];

	/* The directory is ours and its name has no shell characters. */
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", scratch);
	if (system(cmd) != 0)
		fprintf(stderr, "fuzz: cannot remove %s\n", scratch);
}

const char *fuzz_scratch_dir(void)
{
	const char *tmp = getenv("TMPDIR");

	if (scratch[0])
		return scratch;
	snprintf(scratch, sizeof(scratch), "%s/ar-fuzz.XXXXXX",
		 tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(scratch))
		abort();
	atexit(fuzz_scratch_remove);
	return scratch;
}

void fuzz_write(const char *path, const void *data, size_t size)
{
	const char *p = data;
	int fd;

	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		abort();
	while (size > 0) {
		ssize_t n = write(fd, p, size);

		if (n <= 0)
			abort();
		p += n;
		size -= (size_t)n;
	}
	if (close(fd) < 0)
		abort();
}
