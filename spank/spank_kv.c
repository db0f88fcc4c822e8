/*
 * spank_kv.c - table-driven "key=value" parsing for the --arachne option
 * and the plugstack.conf arguments: one struct kv_spec row per key says
 * its type, bounds and where the value goes, so both parsers reject the
 * same mistakes with the same words.
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <slurm/spank.h>

#include "arachne.h"

static bool kv_word_is_valid(const char *v)
{
	if (!*v)
		return false;
	for (; *v; v++)
		if (!isalnum((unsigned char)*v) && !strchr("._-", *v))
			return false;
	return true;
}

static void kv_names_join(const char *const *names, char *buf, size_t len)
{
	size_t used = 0;

	buf[0] = '\0';
	for (size_t i = 0; names[i] && used < len; i++)
		used += snprintf(buf + used, len - used, "%s%s",
				 i ? ", " : "", names[i]);
}

static void kv_keys_join(const struct kv_spec *spec, char *buf, size_t len)
{
	size_t used = 0;

	buf[0] = '\0';
	for (size_t i = 0; spec[i].key && used < len; i++)
		used += snprintf(buf + used, len - used, "%s%s",
				 i ? ", " : "", spec[i].key);
}

static int kv_store(const struct kv_spec *s, void *target, const char *value,
		    const char *what)
{
	char *field = (char *)target + s->offset;
	char names[256];
	unsigned long n;
	char *end;

	switch (s->type) {
	case KV_STRING:
	case KV_PATH:
		if (s->type == KV_STRING && !kv_word_is_valid(value)) {
			slurm_error("arachne: %s: %s=%s: expected a name of letters, digits, '.', '_' or '-'",
				    what, s->key, value);
			return -1;
		}
		if (s->type == KV_PATH && value[0] != '/') {
			slurm_error("arachne: %s: %s=%s: expected an absolute path",
				    what, s->key, value);
			return -1;
		}
		if (strlen(value) >= KV_VALUE_MAX) {
			slurm_error("arachne: %s: %s: value longer than %d characters",
				    what, s->key, KV_VALUE_MAX - 1);
			return -1;
		}
		strcpy(field, value);
		break;
	case KV_UINT:
		errno = 0;
		n = strtoul(value, &end, 10);
		if (!isdigit((unsigned char)value[0]) || *end || errno ||
		    n < s->min || n > s->max) {
			slurm_error("arachne: %s: %s=%s: expected an integer from %lu to %lu",
				    what, s->key, value, s->min, s->max);
			return -1;
		}
		*(unsigned long *)field = n;
		break;
	case KV_ENUM:
		for (n = 0; s->names[n]; n++)
			if (!strcmp(s->names[n], value))
				break;
		if (!s->names[n]) {
			kv_names_join(s->names, names, sizeof(names));
			slurm_error("arachne: %s: %s=%s: expected one of %s",
				    what, s->key, value, names);
			return -1;
		}
		*(unsigned long *)field = n;
		break;
	}
	if (s->set_offset)
		*(bool *)((char *)target + s->set_offset) = true;
	return 0;
}

int kv_parse_value(const struct kv_spec *spec, void *target, const char *key,
		   const char *value, const char *what)
{
	char keys[256];

	for (const struct kv_spec *s = spec; s->key; s++)
		if (!strcmp(s->key, key))
			return kv_store(s, target, value, what);
	kv_keys_join(spec, keys, sizeof(keys));
	slurm_error("arachne: %s: unknown key '%s' (expected %s)", what, key,
		    keys);
	return -1;
}

int kv_parse_one(const struct kv_spec *spec, void *target, const char *arg,
		 const char *what)
{
	const char *eq = strchr(arg, '=');
	char key[64];

	if (!eq || eq == arg || eq[1] == '\0') {
		slurm_error("arachne: %s: '%s': expected key=value", what, arg);
		return -1;
	}
	if ((size_t)(eq - arg) >= sizeof(key)) {
		slurm_error("arachne: %s: '%.*s...': key too long", what, 20,
			    arg);
		return -1;
	}
	memcpy(key, arg, eq - arg);
	key[eq - arg] = '\0';
	return kv_parse_value(spec, target, key, eq + 1, what);
}
