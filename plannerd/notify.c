/*
 * notify.c - systemd's readiness protocol (sd_notify(3)) without
 * libsystemd: one datagram of "KEY=VALUE" lines to $NOTIFY_SOCKET, a path
 * or, when it starts with '@', an abstract socket name.
 */
#include "config.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "ar.h"
#include "plannerd.h"

void notify_send(const char *state)
{
	const char *path = getenv("NOTIFY_SOCKET");
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	size_t len;
	int fd;

	if (!path || !*path)
		return;
	len = strlen(path);
	if ((path[0] != '/' && path[0] != '@') || len >= sizeof(sa.sun_path)) {
		ar_log(LOG_WARNING, "NOTIFY_SOCKET=%s: not a socket address",
		       path);
		return;
	}
	memcpy(sa.sun_path, path, len);
	if (path[0] == '@')
		sa.sun_path[0] = '\0';
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return;
	if (sendto(fd, state, strlen(state), MSG_NOSIGNAL,
		   (struct sockaddr *)&sa,
		   (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len)) < 0)
		ar_log(LOG_WARNING, "NOTIFY_SOCKET=%s: %m", path);
	close(fd);
}
