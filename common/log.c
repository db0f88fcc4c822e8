/* log.c - stderr or syslog logging with syslog priorities. */
#include "config.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "ar.h"

static const char *log_ident = "arachne";
static bool log_syslog;
static bool log_stamps;
static int log_max = LOG_INFO;

static const char *const log_names[] = {
	[LOG_EMERG] = "emerg", [LOG_ALERT] = "alert", [LOG_CRIT] = "crit",
	[LOG_ERR] = "error", [LOG_WARNING] = "warning",
	[LOG_NOTICE] = "notice", [LOG_INFO] = "info", [LOG_DEBUG] = "debug",
};

void ar_log_open(const char *ident, bool use_syslog, int max_priority)
{
	log_ident = ident;
	log_syslog = use_syslog;
	log_max = max_priority;
	if (use_syslog)
		openlog(ident, LOG_PID | LOG_NDELAY, LOG_DAEMON);
}

void ar_log_close(void)
{
	if (log_syslog)
		closelog();
	log_syslog = false;
}

void ar_log_timestamps(bool on)
{
	log_stamps = on;
}

int ar_log_level_parse(const char *name)
{
	for (int p = LOG_EMERG; p <= LOG_DEBUG; p++)
		if (strcmp(name, log_names[p]) == 0)
			return p;
	return -1;
}

void ar_vlog(int priority, const char *fmt, va_list ap)
{
	if (priority > log_max)
		return;
	if (log_syslog) {
		vsyslog(priority, fmt, ap);
		return;
	}
	if (log_stamps) {
		struct timespec ts;
		struct tm tm;
		char when[32];

		clock_gettime(CLOCK_REALTIME, &ts);
		localtime_r(&ts.tv_sec, &tm);
		strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
		fprintf(stderr, "%s.%03ld ", when, ts.tv_nsec / 1000000);
	}
	fprintf(stderr, "%s: %s: ", log_ident, log_names[priority & 7]);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
}

void ar_log(int priority, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	ar_vlog(priority, fmt, ap);
	va_end(ap);
}

double ar_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}
