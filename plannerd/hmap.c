/* hmap.c - string-keyed hash map with separate chaining (FNV-1a). */
#include "config.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "hmap.h"

struct hmap_entry {
	struct hmap_entry *next;
	uint64_t hash;
	void *value;
	char key[];
};

struct hmap {
	struct hmap_entry **buckets;
	size_t nbuckets;		/* a power of two */
	size_t count;
	void (*free_value)(void *);
};

static uint64_t hmap_hash(const char *key)
{
	uint64_t h = 0xcbf29ce484222325ULL;

	for (; *key; key++)
		h = (h ^ (unsigned char)*key) * 0x100000001b3ULL;
	return h;
}

struct hmap *hmap_create(void (*free_value)(void *))
{
	struct hmap *map = calloc(1, sizeof(*map));

	if (!map)
		return NULL;
	map->nbuckets = 64;
	map->buckets = calloc(map->nbuckets, sizeof(*map->buckets));
	if (!map->buckets) {
		free(map);
		return NULL;
	}
	map->free_value = free_value;
	return map;
}

void hmap_destroy(struct hmap *map)
{
	if (!map)
		return;
	for (size_t i = 0; i < map->nbuckets; i++) {
		struct hmap_entry *e = map->buckets[i], *next;

		for (; e; e = next) {
			next = e->next;
			if (map->free_value)
				map->free_value(e->value);
			free(e);
		}
	}
	free(map->buckets);
	free(map);
}

static struct hmap_entry **hmap_slot(const struct hmap *map, const char *key,
				     uint64_t hash)
{
	struct hmap_entry **pe = &map->buckets[hash & (map->nbuckets - 1)];

	for (; *pe; pe = &(*pe)->next)
		if ((*pe)->hash == hash && strcmp((*pe)->key, key) == 0)
			break;
	return pe;
}

void *hmap_get(const struct hmap *map, const char *key)
{
	struct hmap_entry *e = *hmap_slot(map, key, hmap_hash(key));

	return e ? e->value : NULL;
}

/* Double the table when the chains average more than one entry. */
static void hmap_grow(struct hmap *map)
{
	size_t n = map->nbuckets * 2;
	struct hmap_entry **b = calloc(n, sizeof(*b));

	if (!b)
		return;		/* longer chains, still correct */
	for (size_t i = 0; i < map->nbuckets; i++) {
		struct hmap_entry *e = map->buckets[i], *next;

		for (; e; e = next) {
			next = e->next;
			e->next = b[e->hash & (n - 1)];
			b[e->hash & (n - 1)] = e;
		}
	}
	free(map->buckets);
	map->buckets = b;
	map->nbuckets = n;
}

int hmap_put(struct hmap *map, const char *key, void *value)
{
	uint64_t hash = hmap_hash(key);
	struct hmap_entry **pe = hmap_slot(map, key, hash), *e;
	size_t klen;

	if (*pe) {
		if (map->free_value && (*pe)->value != value)
			map->free_value((*pe)->value);
		(*pe)->value = value;
		return 0;
	}
	klen = strlen(key);
	e = malloc(sizeof(*e) + klen + 1);
	if (!e)
		return -ENOMEM;
	memcpy(e->key, key, klen + 1);
	e->hash = hash;
	e->value = value;
	e->next = NULL;
	*pe = e;
	if (++map->count > map->nbuckets)
		hmap_grow(map);
	return 0;
}

int hmap_remove(struct hmap *map, const char *key)
{
	struct hmap_entry **pe = hmap_slot(map, key, hmap_hash(key)), *e = *pe;

	if (!e)
		return 0;
	*pe = e->next;
	if (map->free_value)
		map->free_value(e->value);
	free(e);
	map->count--;
	return 1;
}

size_t hmap_count(const struct hmap *map)
{
	return map->count;
}

void hmap_foreach(const struct hmap *map,
		  void (*fn)(const char *key, void *value, void *arg),
		  void *arg)
{
	for (size_t i = 0; i < map->nbuckets; i++)
		for (struct hmap_entry *e = map->buckets[i]; e; e = e->next)
			fn(e->key, e->value, arg);
}
