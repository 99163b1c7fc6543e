// SPDX-License-Identifier: GPL-2.0
/*
 * A C++ object whose owner forgets it, for `pmctl unreachable` and
 * valgrind (as unreach.c): each "open N" makes the server replace its
 * current session N times without deleting the old one, whose name and
 * data go with it. "quit" deletes the last session and returns.
 */
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

struct Session {
	std::string name;
	std::vector<long> data;
	explicit Session(int id) : name("session number " + std::to_string(id) + " of the server"),
				   data(static_cast<size_t>(16 + id % 8), id) {}
};

class Server {
public:
	__attribute__((noinline)) void open(int id)
	{
		current_ = new Session(id);	// LOST: definite
	}
	~Server() { delete current_; }

private:
	Session *current_ = nullptr;
};

static Server g_server;

/* the stack below main cleared: no stale pointer of a command's in the
 * frames of stdio's next call (see unreach.c) */
__attribute__((noinline)) static void scrub()
{
	char dead[32768];

	explicit_bzero(dead, sizeof(dead));	// a store the compiler keeps
}

int main()
{
	char line[128], cmd[16];
	int n;

	setvbuf(stdout, nullptr, _IOLBF, 0);
	while (fgets(line, sizeof(line), stdin)) {
		n = 0;
		if (sscanf(line, "%15s %d", cmd, &n) < 1)
			continue;
		if (!strcmp(cmd, "open"))
			for (int i = 0; i < n; i++)
				g_server.open(i);
		else if (!strcmp(cmd, "quit"))
			break;
		scrub();
		printf("ok %s %d\n", cmd, n);
	}
	printf("bye\n");
	return 0;
}
