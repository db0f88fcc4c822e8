/* sock.c - the listening Unix socket. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "ar.h"
#include "plannerd.h"

/*
 * A socket file is left behind when a daemon is killed.  Connecting tells
 * a leftover (refused) from a live daemon (accepted), which must not be
 * displaced; anything that is not a socket is never removed.
 */
static int sock_clear_stale(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct stat st;
	int fd, rc;

	if (lstat(path, &st) < 0)
		return errno == ENOENT ? 0 :
		       ar_seterr(-errno, "%s: %s", path, strerror(errno));
	if (!S_ISSOCK(st.st_mode))
		return ar_seterr(-EEXIST, "%s: exists and is not a socket; not replacing it",
				 path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	memcpy(sa.sun_path, path, strlen(path) + 1);
	rc = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
	close(fd);
	if (rc == 0)
		return ar_seterr(-EADDRINUSE, "%s: another plannerd is serving it",
				 path);
	ar_log(LOG_NOTICE, "%s: removing a stale socket", path);
	if (unlink(path) < 0 && errno != ENOENT)
		return ar_seterr(-errno, "%s: cannot remove stale socket: %s",
				 path, strerror(errno));
	return 0;
}

int sock_listen(const struct conf *conf, ino_t *inop)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	const char *path = conf->socket_path;
	size_t len = strlen(path);
	struct stat st;
	mode_t old_umask;
	int fd, rc;

	if (len >= sizeof(sa.sun_path))
		return ar_seterr(-ENAMETOOLONG, "socket_path: %s is %zu bytes, longer than the %zu a Unix socket address holds",
				 path, len, sizeof(sa.sun_path) - 1);
	memcpy(sa.sun_path, path, len + 1);
	rc = sock_clear_stale(path);
	if (rc < 0)
		return rc;
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return ar_seterr(-errno, "socket: %s", strerror(errno));
	/* No window in which the socket has looser permissions. */
	old_umask = umask(0777 & ~conf->socket_mode);
	rc = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
	umask(old_umask);
	if (rc < 0) {
		rc = ar_seterr(-errno, "%s: bind: %s", path, strerror(errno));
		goto err;
	}
	if (conf->socket_gid != (gid_t)-1 &&
	    chown(path, (uid_t)-1, conf->socket_gid) < 0) {
		rc = ar_seterr(-errno, "%s: chown to group %s: %s", path,
			       conf->socket_group, strerror(errno));
		goto err_unlink;
	}
	if (chmod(path, conf->socket_mode) < 0 || stat(path, &st) < 0) {
		rc = ar_seterr(-errno, "%s: %s", path, strerror(errno));
		goto err_unlink;
	}
	if (listen(fd, SOMAXCONN) < 0) {
		rc = ar_seterr(-errno, "%s: listen: %s", path, strerror(errno));
		goto err_unlink;
	}
	*inop = st.st_ino;
	return fd;
err_unlink:
	unlink(path);
err:
	close(fd);
	return rc;
}

/* Remove the socket at exit, unless another daemon has replaced it. */
void sock_unlink(const char *path, ino_t ino)
{
	struct stat st;

	if (path && stat(path, &st) == 0 && st.st_ino == ino)
		unlink(path);
}
