// SPDX-License-Identifier: GPL-2.0
// C++ under the hook: new/delete, std::string, containers, 4 std::threads.
// Prints a deterministic digest; the host test compares it with a bare run.
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

static unsigned long work(int id)
{
	std::map<std::string, std::vector<int>> m;
	unsigned long sum = 0;

	for (int i = 0; i < 20000; i++) {
		std::string key = "key-" + std::to_string((i * 7 + id) % 997);
		auto &v = m[key];
		v.push_back(i);
		if (v.size() > 8)
			v.erase(v.begin());
		auto *p = new long[(i % 50) + 1];
		p[0] = i;
		sum += static_cast<unsigned long>(p[0]);
		delete[] p;
		auto u = std::make_unique<std::string>(static_cast<size_t>(i % 300), 'x');
		sum += u->size();
	}
	for (auto &kv : m)
		sum += kv.first.size() + kv.second.size();
	return sum;
}

// cxx_threads [ROUNDS]: ROUNDS rounds 20 ms apart, "ready PID" first (a
// program to attach to); the digest sums them.
int main(int argc, char **argv)
{
	int rounds = argc > 1 ? std::atoi(argv[1]) : 1;
	unsigned long out[4] = {};

	if (argc > 1) {
		std::printf("ready %d\n", static_cast<int>(getpid()));
		std::fflush(stdout);
	}
	for (int r = 0; r < rounds; r++) {
		std::vector<std::thread> ts;

		for (int i = 0; i < 4; i++)
			ts.emplace_back([i, &out] { out[i] += work(i); });
		for (auto &t : ts)
			t.join();
		if (argc > 1)
			usleep(20000);
	}
	for (int i = 0; i < 4; i++)
		std::printf("thread %d: %lu\n", i, out[i]);
	return 0;
}
