/*
 * spank_client.c - one request to plannerd and its answer, bounded in
 * time: the socket is non-blocking and every connect, write and read
 * waits in poll() for what is left of one deadline, so a plannerd that is
 * down, wedged or slow costs a job at most timeout_ms.
 *
 * Wire format (plannerd/PROTOCOL.md): one JSON object per line each way.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "ar.h"
#include "arachne.h"

#define CLIENT_RESPONSE_MAX (64 << 20)	/* a plan for 4096 GPUs fits */

static int client_wait(int fd, short events, double deadline)
{
	struct pollfd p = { .fd = fd, .events = events };
	double left = deadline - ar_now();
	int rc;

	if (left <= 0)
		return -AR_ETIMEOUT;
	do {
		rc = poll(&p, 1, (int)(left * 1000) + 1);
	} while (rc < 0 && errno == EINTR);
	if (rc < 0)
		return -errno;
	if (rc == 0)
		return -AR_ETIMEOUT;
	return 0;
}

static int client_connect(const char *path, double deadline)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	socklen_t len = sizeof(int);
	int fd, rc, err = 0;

	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
		return fd;
	if (errno != EINPROGRESS && errno != EAGAIN) {
		rc = -errno;
		goto err_close;
	}
	rc = client_wait(fd, POLLOUT, deadline);
	if (rc < 0)
		goto err_close;
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0 || err) {
		rc = err ? -err : -errno;
		goto err_close;
	}
	return fd;

err_close:
	close(fd);
	return rc;
}

static int client_send(int fd, const char *buf, size_t len, double deadline)
{
	while (len > 0) {
		ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);

		if (n < 0) {
			int rc;

			if (errno == EINTR)
				continue;
			if (errno != EAGAIN)
				return -errno;
			rc = client_wait(fd, POLLOUT, deadline);
			if (rc < 0)
				return rc;
			continue;
		}
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Reads up to the first newline; *linep is NUL-terminated, caller frees. */
static int client_recv_line(int fd, double deadline, char **linep)
{
	size_t len = 0, cap = 4096;
	char *buf = malloc(cap), *nl;
	int rc;

	*linep = NULL;
	if (!buf)
		return -ENOMEM;
	for (;;) {
		ssize_t n;

		if (cap - len < 2) {
			if (cap >= CLIENT_RESPONSE_MAX) {
				rc = ar_seterr(-AR_EPROTO, "plannerd's answer is longer than %d bytes",
					       CLIENT_RESPONSE_MAX);
				goto err_free;
			}
			if (AR_GROW(buf, cap, len + 2, 4096) < 0) {
				rc = -ENOMEM;
				goto err_free;
			}
		}
		rc = client_wait(fd, POLLIN, deadline);
		if (rc < 0)
			goto err_free;
		n = recv(fd, buf + len, cap - len - 1, 0);
		if (n < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			rc = -errno;
			goto err_free;
		}
		if (n == 0) {
			rc = ar_seterr(-AR_EPROTO, "plannerd closed the connection without an answer");
			goto err_free;
		}
		buf[len + (size_t)n] = '\0';
		nl = memchr(buf + len, '\n', (size_t)n);
		len += (size_t)n;
		if (nl) {
			*nl = '\0';
			*linep = buf;
			return 0;
		}
	}

err_free:
	free(buf);
	return rc;
}

static void client_why(char *why, size_t whylen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void client_why(char *why, size_t whylen, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, whylen, fmt, ap);
	va_end(ap);
}

int client_call(const char *socket_path, unsigned long timeout_ms,
		json_t *req, json_t **respp, char *why, size_t whylen)
{
	double deadline = ar_now() + timeout_ms / 1000.0;
	char *line = NULL, *text = NULL;
	json_t *resp = NULL, *err;
	json_error_t jerr;
	int fd, rc;

	*respp = NULL;
	why[0] = '\0';
	fd = client_connect(socket_path, deadline);
	if (fd < 0) {
		client_why(why, whylen, "cannot reach plannerd at %s: %s",
			   socket_path, ar_strerror(fd));
		return fd;
	}
	text = json_dumps(req, JSON_COMPACT);
	if (!text) {
		rc = -ENOMEM;
		goto out;
	}
	rc = client_send(fd, text, strlen(text), deadline);
	if (rc == 0)
		rc = client_send(fd, "\n", 1, deadline);
	if (rc == 0)
		rc = client_recv_line(fd, deadline, &line);
	if (rc < 0) {
		if (rc == -AR_ETIMEOUT)
			client_why(why, whylen, "plannerd at %s did not answer within %lu ms",
				   socket_path, timeout_ms);
		else
			client_why(why, whylen, "plannerd at %s: %s",
				   socket_path, rc == -AR_EPROTO ?
				   ar_errmsg() : ar_strerror(rc));
		goto out;
	}
	resp = json_loads(line, 0, &jerr);
	if (!json_is_object(resp)) {
		client_why(why, whylen, "plannerd sent an answer that is not a JSON object: %s",
			   jerr.text);
		rc = -AR_EPROTO;
		goto out;
	}
	if (!json_is_true(json_object_get(resp, "ok"))) {
		const char *code, *msg;

		err = json_object_get(resp, "error");
		code = json_string_value(json_object_get(err, "code"));
		msg = json_string_value(json_object_get(err, "message"));
		client_why(why, whylen, "plannerd refused the request (%s): %s",
			   code ? code : "no code", msg ? msg : "no reason given");
		rc = code && !strcmp(code, "permission") ? -AR_EPERM :
		     -AR_EINVAL;
		goto out;
	}
	*respp = resp;
	resp = NULL;
	rc = 0;
out:
	json_decref(resp);
	free(line);
	free(text);
	close(fd);
	return rc;
}
