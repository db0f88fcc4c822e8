/* cache.c - an LRU map from request keys to plans. */
#include "config.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cache.h"
#include "hmap.h"

struct cache_entry {
	struct cache_entry *prev, *next;	/* LRU list, newest at head */
	json_t *plan;
	char *key;
};

struct cache {
	pthread_mutex_t lock;
	struct hmap *map;		/* key -> entry; the map owns entries */
	struct cache_entry head;	/* list sentinel */
	size_t capacity;
};

static void cache_entry_free(void *p)
{
	struct cache_entry *e = p;

	e->prev->next = e->next;
	e->next->prev = e->prev;
	json_decref(e->plan);
	free(e->key);
	free(e);
}

struct cache *cache_create(size_t capacity)
{
	struct cache *cache = calloc(1, sizeof(*cache));

	if (!cache)
		return NULL;
	cache->map = hmap_create(cache_entry_free);
	if (!cache->map) {
		free(cache);
		return NULL;
	}
	pthread_mutex_init(&cache->lock, NULL);
	cache->head.prev = cache->head.next = &cache->head;
	cache->capacity = capacity;
	return cache;
}

void cache_destroy(struct cache *cache)
{
	if (!cache)
		return;
	hmap_destroy(cache->map);
	pthread_mutex_destroy(&cache->lock);
	free(cache);
}

static void cache_link_front(struct cache *cache, struct cache_entry *e)
{
	e->next = cache->head.next;
	e->prev = &cache->head;
	cache->head.next->prev = e;
	cache->head.next = e;
}

json_t *cache_get(struct cache *cache, const char *key)
{
	struct cache_entry *e;
	json_t *plan = NULL;

	pthread_mutex_lock(&cache->lock);
	e = hmap_get(cache->map, key);
	if (e) {
		e->prev->next = e->next;
		e->next->prev = e->prev;
		cache_link_front(cache, e);
		plan = json_incref(e->plan);
	}
	pthread_mutex_unlock(&cache->lock);
	return plan;
}

void cache_put(struct cache *cache, const char *key, json_t *plan)
{
	struct cache_entry *e;

	if (cache->capacity == 0)
		return;
	pthread_mutex_lock(&cache->lock);
	hmap_remove(cache->map, key);
	e = calloc(1, sizeof(*e));
	if (!e || !(e->key = strdup(key))) {
		free(e);
		goto out;	/* a cache that misses is still correct */
	}
	e->plan = json_incref(plan);
	cache_link_front(cache, e);
	if (hmap_put(cache->map, key, e) < 0) {
		cache_entry_free(e);
		goto out;
	}
	while (hmap_count(cache->map) > cache->capacity)
		hmap_remove(cache->map, cache->head.prev->key);
out:
	pthread_mutex_unlock(&cache->lock);
}

void cache_clear(struct cache *cache)
{
	pthread_mutex_lock(&cache->lock);
	while (cache->head.next != &cache->head)
		hmap_remove(cache->map, cache->head.next->key);
	pthread_mutex_unlock(&cache->lock);
}

size_t cache_count(struct cache *cache)
{
	size_t n;

	pthread_mutex_lock(&cache->lock);
	n = hmap_count(cache->map);
	pthread_mutex_unlock(&cache->lock);
	return n;
}
